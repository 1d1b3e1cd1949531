#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "planner/detail/umpipe_lanes.hpp"
#include "planner/umpipe_baselines.hpp"
#include "planner/umpipe_batch_evaluator.hpp"
#include "planner/umpipe_evaluator.hpp"
#include "planner/umpipe_ga.hpp"
#include "planner/umpipe_problem.hpp"
#include "umpipe_reference.hpp"

namespace tandem::planner {
namespace {

using schedules::Cost;

constexpr double kInf = std::numeric_limits<double>::infinity();

// docs/architecture.md#planner: P=2, B=4, f1=b, g1=2b, f2=2+b/2, g2=4+b, c=0.
UmpipeProblem golden() {
  UmpipeProblem problem;
  problem.minibatch = 4;
  problem.stages.push_back({Cost::affine(0, 1), Cost::affine(0, 2)});
  problem.stages.push_back({Cost::affine(2, 0.5), Cost::affine(4, 1)});
  return problem;
}

std::vector<std::vector<int>> compositions(int n) {
  std::vector<std::vector<int>> all;
  std::vector<int> current;
  std::function<void(int)> go = [&](int left) {
    if (left == 0) {
      all.push_back(current);
      return;
    }
    for (int b = 1; b <= left; ++b) {
      current.push_back(b);
      go(left - b);
      current.pop_back();
    }
  };
  go(n);
  return all;
}

// Best makespan over every forward and backward composition on each of two stages; `tied`
// keeps backward equal to forward per stage (a single chromosome).
double brute_force_two_stages(const UmpipeProblem& problem, bool tied) {
  const auto all = compositions(problem.minibatch);
  double best = kInf;
  UmpipeSlices slices;
  slices.forward.resize(2);
  slices.backward.resize(2);
  for (const auto& f0 : all) {
    for (const auto& f1 : all) {
      slices.forward = {f0, f1};
      if (tied) {
        slices.backward = slices.forward;
        best = std::min(best, umpipe_makespan(problem, slices));
        continue;
      }
      for (const auto& b0 : all) {
        for (const auto& b1 : all) {
          slices.backward = {b0, b1};
          best = std::min(best, umpipe_makespan(problem, slices));
        }
      }
    }
  }
  return best;
}

TEST(UmpipeMakespan, GoldenOptimumByHand) {
  UmpipeSlices slices;
  slices.forward = {{1, 3}, {1, 3}};
  slices.backward = {{3, 1}, {3, 1}};
  // F0: [0,1) 0-1, [1,4) 1-4. F1: [0,1) 1-3.5, [1,4) 4-7.5. B1 in sample order: [0,3) 7.5-14.5,
  // [3,4) 14.5-19.5. B0: [0,3) 14.5-20.5, [3,4) 20.5-22.5.
  EXPECT_DOUBLE_EQ(umpipe_makespan(golden(), slices), 22.5);
  EXPECT_DOUBLE_EQ(umpipe_makespan(golden(), equal_slices(2, 4, 1)), 24);
  EXPECT_DOUBLE_EQ(umpipe_makespan(golden(), equal_slices(2, 4, 2)), 24);
  EXPECT_DOUBLE_EQ(umpipe_makespan(golden(), equal_slices(2, 4, 4)), 33);
}

TEST(UmpipeMakespan, GoldenOptimaByExhaustiveSearch) {
  EXPECT_DOUBLE_EQ(brute_force_two_stages(golden(), false), 22.5);
  EXPECT_DOUBLE_EQ(brute_force_two_stages(golden(), true), 24);
  EXPECT_DOUBLE_EQ(best_equal_slices(golden()).makespan, 24);
}

TEST(UmpipeMakespan, LinkDelayAndStraggler) {
  // One sample per slice, two stages of unit cost, c = 1: F1 waits c after F0 for each slice.
  UmpipeProblem problem;
  problem.minibatch = 2;
  problem.links = {Cost::affine(1, 0)};
  problem.stages.assign(2, {Cost::affine(0, 1), Cost::affine(0, 1)});
  // F0: 0-1, 1-2. F1: 2-3, 3-4. B1: 4-5, 5-6. B0: 6-7, 7-8.
  EXPECT_DOUBLE_EQ(umpipe_makespan(problem, equal_slices(2, 2, 2)), 8);
  // Stage 1 waits for a whole 2-sample slice: F0 0-2, F1 3-5, B1 5-7, B0 8-10.
  UmpipeSlices merged = equal_slices(2, 2, 2);
  merged.forward[0] = {2};
  merged.backward[1] = {2};
  EXPECT_DOUBLE_EQ(umpipe_makespan(problem, merged), 10);
}

TEST(UmpipeMakespan, RejectsBadPartitions) {
  UmpipeSlices slices = equal_slices(2, 4, 2);
  slices.backward[1] = {1, 2};
  EXPECT_THROW(umpipe_makespan(golden(), slices), std::invalid_argument);
  slices.backward[1] = {0, 4};
  EXPECT_THROW(umpipe_makespan(golden(), slices), std::invalid_argument);
  UmpipeProblem short_table = golden();
  short_table.stages[1].forward = Cost::measured({1, 2, 3});
  EXPECT_THROW(umpipe_makespan(short_table, equal_slices(2, 4, 2)), std::invalid_argument);
}

TEST(UmpipeCuts, RoundTrip) {
  UmpipeSlices slices;
  slices.forward = {{1, 3}, {2, 1, 1}};
  slices.backward = {{4}, {1, 1, 1, 1}};
  const auto bits = cuts_of(slices, 4);
  EXPECT_EQ(bits, (std::vector<std::uint64_t>{0b1001, 0b1110, 0b1000, 0b1111}));
  EXPECT_EQ(slices_of(bits, 2, 4), slices);
  // Rows longer than a word.
  UmpipeSlices wide;
  wide.forward = {{63, 1, 2, 64, 70}};
  wide.backward = {{1, 199}};
  const auto words = cuts_of(wide, 200);
  ASSERT_EQ(words.size(), 8u);
  EXPECT_EQ(words[0], std::uint64_t{1} << 62 | std::uint64_t{1} << 63);
  EXPECT_EQ(words[1], std::uint64_t{1} << 1);  // sample 65
  EXPECT_EQ(words[2], std::uint64_t{1} << 1);  // sample 129
  EXPECT_EQ(words[3], std::uint64_t{1} << 7);  // sample 199, the end
  EXPECT_EQ(slices_of(words, 1, 200), wide);
}

UmpipeProblem random_problem(std::mt19937& rng, int stages, int samples, bool tables) {
  std::uniform_real_distribution<double> value(0.0, 3.0);
  UmpipeProblem problem;
  problem.minibatch = samples;
  switch (rng() % 4) {
    case 0:
      break;  // no delay
    case 1:
      problem.links = {Cost::affine(value(rng) * 0.5, 0)};  // constant c
      break;
    case 2:  // per boundary, growing with the slice
      for (int s = 0; s + 1 < stages; ++s) {
        problem.links.push_back(Cost::affine(value(rng) * 0.5, value(rng) * 0.3));
      }
      break;
    default: {  // measured, not monotone
      std::vector<double> d(samples);
      for (double& x : d) x = value(rng);
      problem.links = {Cost::measured(d)};
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (tables) {
      std::vector<double> f(samples), g(samples);
      for (int b = 0; b < samples; ++b) {
        f[b] = value(rng) + b * 0.3;
        g[b] = value(rng) + b * 0.5;
      }
      problem.stages.push_back({Cost::measured(f), Cost::measured(g)});
    } else {
      problem.stages.push_back(
          {Cost::affine(value(rng), value(rng)), Cost::affine(value(rng), value(rng))});
    }
  }
  return problem;
}

// Measured and per-boundary link delays, which the simulator cannot express: against the
// clarity-first oracle.
TEST(UmpipeEvaluators, AgreeWithTheReference) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 60; ++trial) {
    const int stages = 1 + trial % 6;
    const int samples = 1 + (trial * 37) % 150;  // one to three words per row
    const UmpipeProblem problem = random_problem(rng, stages, samples, trial % 2 == 0);
    const std::size_t stride = umpipe_gene_words(stages, samples);
    const int count = 1 + trial % 37;  // partial SIMD blocks too
    const double density = 0.1 + 0.8 * (trial % 5) / 4.0;
    std::vector<std::uint64_t> genes;
    for (int k = 0; k < count; ++k) {
      UmpipeSlices slices;  // random compositions from random cut bits
      for (int dir = 0; dir < 2; ++dir) {
        for (int s = 0; s < stages; ++s) {
          std::vector<int> sizes;
          int begin = 0;
          for (int i = 0; i < samples; ++i) {
            if (i + 1 == samples || std::bernoulli_distribution(density)(rng)) {
              sizes.push_back(i + 1 - begin);
              begin = i + 1;
            }
          }
          (dir == 0 ? slices.forward : slices.backward).push_back(sizes);
        }
      }
      const auto bits = cuts_of(slices, samples);
      genes.insert(genes.end(), bits.begin(), bits.end());
    }
    std::vector<double> batched(count), portable(count);
    UmpipeBatchEvaluator batch(problem);
    EXPECT_EQ(batch.wide(), detail::umpipe_avx512_available());
    batch.evaluate(genes, batched);
    UmpipeBatchEvaluator portable_batch(problem, UmpipeKernels::portable);
    portable_batch.evaluate(genes, portable);
    UmpipeEvaluator single(problem);
    for (int k = 0; k < count; ++k) {
      const std::span<const std::uint64_t> one(genes.data() + k * stride, stride);
      const double reference =
          testing::reference_makespan(problem, slices_of(one, stages, samples));
      SCOPED_TRACE("trial " + std::to_string(trial) + " individual " + std::to_string(k));
      EXPECT_NEAR(single.makespan(one), reference, 1e-9 * reference);
      EXPECT_EQ(batched[k], single.makespan(one));  // same arithmetic, same order
      EXPECT_EQ(portable[k], single.makespan(one));
    }
  }
}

TEST(UmpipeBaselines, GoldenValues) {
  // Stage 0's (f+g)/b is 3 for every b; stage 1's 6/b + 1.5 is least at b = 4.
  const UmpipeCandidate local = local_greedy_slices(golden());
  EXPECT_EQ(local.slices.forward, (std::vector<std::vector<int>>{{4}, {4}}));
  EXPECT_DOUBLE_EQ(local.makespan, 24);
  const UmpipeCandidate global = global_greedy_slices(golden());
  EXPECT_DOUBLE_EQ(global.makespan, umpipe_makespan(golden(), global.slices));
  EXPECT_DOUBLE_EQ(global.makespan, 22.5);
  EXPECT_EQ(global.slices.forward, (std::vector<std::vector<int>>{{1, 3}, {1, 3}}));
  EXPECT_EQ(global.slices.backward, (std::vector<std::vector<int>>{{3, 1}, {3, 1}}));
  const UmpipeCandidate equal = best_equal_slices(golden());
  EXPECT_DOUBLE_EQ(equal.makespan, umpipe_makespan(golden(), equal.slices));
}

TEST(UmpipeGa, FindsTheGoldenOptimumFromEqualPartitions) {
  UmpipeGaOptions options;
  options.seed_baselines = false;  // only equal partitions: the GA has to find 22.5 itself
  options.population = 16;
  options.generations = 40;
  options.seed = 3;
  const UmpipeGaResult result = run_umpipe_ga(golden(), options);
  EXPECT_DOUBLE_EQ(result.makespan, 22.5);
  EXPECT_DOUBLE_EQ(umpipe_makespan(golden(), result.slices), 22.5);
  // The initial population (equal partitions and mutated copies) does not hold the optimum:
  // evolution found it.
  EXPECT_GT(result.best_by_generation.front(), 22.5);
  EXPECT_EQ(result.best_by_generation.size(), 41u);
  EXPECT_EQ(result.evaluations, 16 * 41);
  for (std::size_t g = 1; g < result.best_by_generation.size(); ++g) {
    EXPECT_LE(result.best_by_generation[g], result.best_by_generation[g - 1]);
  }
}

TEST(UmpipeGa, SingleChromosomeStopsAt24) {
  UmpipeGaOptions options;
  options.dual = false;
  options.population = 16;
  options.generations = 40;
  const UmpipeGaResult result = run_umpipe_ga(golden(), options);
  EXPECT_DOUBLE_EQ(result.makespan, 24);
  EXPECT_EQ(result.slices.forward, result.slices.backward);
}

TEST(UmpipeGa, DeterministicForASeedAndIndependentOfBatching) {
  std::mt19937 rng(5);
  const UmpipeProblem problem = random_problem(rng, 4, 24, false);
  UmpipeGaOptions options;
  options.population = 24;
  options.generations = 30;
  options.seed = 42;
  const UmpipeGaResult first = run_umpipe_ga(problem, options);
  const UmpipeGaResult again = run_umpipe_ga(problem, options);
  EXPECT_EQ(first.slices, again.slices);
  EXPECT_EQ(first.best_by_generation, again.best_by_generation);
  options.batched = false;
  const UmpipeGaResult one_by_one = run_umpipe_ga(problem, options);
  EXPECT_EQ(first.best_by_generation, one_by_one.best_by_generation);
  EXPECT_EQ(first.slices, one_by_one.slices);
}

// The progress callback hears generations 0..total in order with the run's own best so far,
// and the run with it is bit for bit the run without.
TEST(UmpipeGa, ProgressHearsEveryGenerationAndChangesNothing) {
  std::mt19937 rng(6);
  const UmpipeProblem problem = random_problem(rng, 4, 24, true);
  UmpipeGaOptions options;
  options.population = 24;
  options.generations = 30;
  options.seed = 7;
  const UmpipeGaResult silent = run_umpipe_ga(problem, options);
  std::vector<UmpipeGaProgress> heard;
  options.progress = [&](const UmpipeGaProgress& p) { heard.push_back(p); };
  const UmpipeGaResult reported = run_umpipe_ga(problem, options);
  EXPECT_EQ(reported.slices, silent.slices);
  EXPECT_EQ(reported.best_by_generation, silent.best_by_generation);
  EXPECT_EQ(reported.makespan, silent.makespan);
  EXPECT_EQ(reported.evaluations, silent.evaluations);
  ASSERT_EQ(heard.size(), 31u);
  for (std::size_t g = 0; g < heard.size(); ++g) {
    EXPECT_EQ(heard[g].generation, static_cast<int>(g));
    EXPECT_EQ(heard[g].generations, 30);
    EXPECT_EQ(heard[g].best_makespan, reported.best_by_generation[g]) << g;
    EXPECT_EQ(heard[g].evaluations, 24 * static_cast<long long>(g + 1));
    EXPECT_GE(heard[g].elapsed_seconds, g == 0 ? 0.0 : heard[g - 1].elapsed_seconds);
  }
  EXPECT_EQ(heard.back().best_makespan, reported.makespan);
  // A callback that throws ends the search there.
  int calls = 0;
  options.progress = [&](const UmpipeGaProgress& p) {
    ++calls;
    if (p.generation == 3) throw std::runtime_error("stop");
  };
  EXPECT_THROW(run_umpipe_ga(problem, options), std::runtime_error);
  EXPECT_EQ(calls, 4);
}

TEST(UmpipeGa, NeverWorseThanItsSeeds) {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 5; ++trial) {
    const UmpipeProblem problem = random_problem(rng, 3 + trial, 16 + 4 * trial, trial % 2 == 1);
    UmpipeGaOptions options;
    options.population = 32;
    options.generations = 25;
    options.seed = trial;
    const UmpipeGaResult result = run_umpipe_ga(problem, options);
    EXPECT_DOUBLE_EQ(result.makespan, umpipe_makespan(problem, result.slices));
    EXPECT_LE(result.makespan, best_equal_slices(problem).makespan);
    EXPECT_LE(result.makespan, local_greedy_slices(problem).makespan);
    EXPECT_LE(result.makespan, global_greedy_slices(problem).makespan);
  }
}

TEST(UmpipeGa, OneSampleMinibatch) {
  UmpipeProblem problem;
  problem.minibatch = 1;
  problem.stages.assign(3, {Cost::affine(1, 1), Cost::affine(1, 2)});
  const UmpipeGaResult result = run_umpipe_ga(problem, {});
  EXPECT_DOUBLE_EQ(result.makespan, 3 * 2 + 3 * 3);
}

TEST(UmpipeGa, RejectsBadOptions) {
  UmpipeGaOptions options;
  options.population = 1;
  EXPECT_THROW(run_umpipe_ga(golden(), options), std::invalid_argument);
  options = {};
  options.elites = options.population;
  EXPECT_THROW(run_umpipe_ga(golden(), options), std::invalid_argument);
  options = {};
  options.crossover_rate = 1.5;
  EXPECT_THROW(run_umpipe_ga(golden(), options), std::invalid_argument);
}

}  // namespace
}  // namespace tandem::planner
