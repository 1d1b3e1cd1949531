#pragma once
// UMPIPE's dual-chromosome genetic algorithm (docs/architecture.md#planner): one bit matrix of
// forward cuts and one of backward cuts per individual, fitness 1 / makespan.
#include <cstdint>
#include <functional>
#include <vector>

#include "planner/umpipe_problem.hpp"

namespace tandem::planner {

// Where a run stands, after a generation has been evaluated.
struct UmpipeGaProgress {
  int generation = 0;  // 0: the initial population; the last is `generations`
  int generations = 0;
  double best_makespan = 0;  // the best so far, in the problem's time unit
  long long evaluations = 0;
  double elapsed_seconds = 0;  // wall time since the run started
};

struct UmpipeGaOptions {
  int population = 64;
  int generations = 200;
  int elites = 2;               // best individuals copied unchanged into the next generation
  int tournament = 3;           // contestants per selection
  double crossover_rate = 0.9;  // per chromosome: one-point or row-uniform crossover
  double flip_rate = -1;        // per bit; < 0: one flip per chromosome on average
  double move_rate = 0.5;       // per chromosome: move one cut by 1..3 samples
  // false: a single chromosome, backward cuts equal to forward cuts on every stage.
  bool dual = true;
  // Seed with the local and global greedy plans besides the equal partitions.
  bool seed_baselines = true;
  // Evaluate the whole population at once (UmpipeBatchEvaluator) or one by one.
  bool batched = true;
  std::uint64_t seed = 1;
  // Called once per generation, initial population included, in order. It does not change
  // the result; an exception it throws ends the run.
  std::function<void(const UmpipeGaProgress&)> progress;
};

struct UmpipeGaResult {
  UmpipeSlices slices;
  double makespan = 0;
  std::vector<double> best_by_generation;  // [0]: the initial population
  long long evaluations = 0;
};

// Deterministic for a given problem, options and seed. Throws std::invalid_argument on bad
// options or an invalid problem.
UmpipeGaResult run_umpipe_ga(const UmpipeProblem& problem, const UmpipeGaOptions& options = {});

}  // namespace tandem::planner
