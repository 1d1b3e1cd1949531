// UMPIPE GA: evaluating a whole population at once (UmpipeBatchEvaluator, with its AVX-512
// kernels where the CPU has them, and with its portable compiler-vectorized kernels) against
// one individual at a time, on the GA's workload: population 64, 200 generations, P = 8
// stages, minibatch 64. One at a time means: the planner's scalar evaluator (bit scans over
// the cuts) and the discrete-event simulator on the materialized umpipe schedule. Every evaluator
// sees the same individuals; compare their evaluations_per_s. Argument: link delay constant (0) or
// growing with the slice (1).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "benches/json_line_reporter.hpp"
#include "planner/umpipe_batch_evaluator.hpp"
#include "planner/umpipe_evaluator.hpp"
#include "planner/umpipe_ga.hpp"
#include "runtime/counter_rng.hpp"
#include "schedules/schedule.hpp"
#include "schedules/simulator.hpp"

namespace tandem::planner {
namespace {

constexpr int kStages = 8;
constexpr int kMinibatch = 64;
constexpr int kPopulation = 64;
constexpr int kGenerations = 200;

// Heterogeneous stages with per-slice overheads, in both models' terms.
struct Costs {
  double f_fixed, f_sample, b_fixed, b_sample;
};
Costs stage_costs(int s) {
  return {0.2 + 0.05 * s, 1.0 + 0.1 * (s % 3), 0.4 + 0.05 * s, 2.0 + 0.2 * (s % 3)};
}
constexpr double kLatency = 0.05;
double per_sample_delay(bool growing) {
  return growing ? 0.002 : 0.0;
}

UmpipeProblem problem(bool growing) {
  UmpipeProblem p;
  p.minibatch = kMinibatch;
  p.links = {schedules::Cost::affine(kLatency, per_sample_delay(growing))};
  for (int s = 0; s < kStages; ++s) {
    const Costs c = stage_costs(s);
    p.stages.push_back({schedules::Cost::affine(c.f_fixed, c.f_sample),
                        schedules::Cost::affine(c.b_fixed, c.b_sample)});
  }
  return p;
}

schedules::SimulationCosts simulation_costs(bool growing) {
  schedules::SimulationCosts costs;
  costs.latency = kLatency;
  costs.bandwidth = 1.0;
  for (int s = 0; s < kStages; ++s) {
    const Costs c = stage_costs(s);
    schedules::StageCosts stage;
    stage.forward = schedules::Cost::affine(c.f_fixed, c.f_sample);
    stage.backward = schedules::Cost::affine(c.b_fixed, c.b_sample);
    stage.output_bytes = per_sample_delay(growing);
    costs.stages.push_back(stage);
  }
  return costs;
}

std::vector<std::vector<std::int64_t>> widen(const std::vector<std::vector<int>>& rows) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& row : rows) out.emplace_back(row.begin(), row.end());
  return out;
}

// kGenerations populations of random individuals whose cut density varies like a GA's.
std::vector<std::vector<std::uint64_t>> populations() {
  auto rng = RngStream::from_seed(7);
  std::vector<std::vector<std::uint64_t>> all(kGenerations);
  for (auto& genes : all) {
    for (int k = 0; k < kPopulation; ++k) {
      const double density = 0.05 + 0.4 * rng.uniform();
      UmpipeSlices slices;
      for (int dir = 0; dir < 2; ++dir) {
        for (int s = 0; s < kStages; ++s) {
          std::vector<int> sizes;
          int begin = 0;
          for (int i = 0; i < kMinibatch; ++i) {
            if (i + 1 == kMinibatch || rng.uniform() < density) {
              sizes.push_back(i + 1 - begin);
              begin = i + 1;
            }
          }
          (dir == 0 ? slices.forward : slices.backward).push_back(sizes);
        }
      }
      const auto bits = cuts_of(slices, kMinibatch);
      genes.insert(genes.end(), bits.begin(), bits.end());
    }
  }
  return all;
}

void BM_EvaluateOneByOne(benchmark::State& state) {
  const UmpipeProblem p = problem(state.range(0) == 1);
  const auto all = populations();
  const std::size_t stride = umpipe_gene_words(kStages, kMinibatch);
  UmpipeEvaluator evaluator(p);
  double sum = 0;
  for (auto _ : state) {
    for (const auto& genes : all) {
      for (int k = 0; k < kPopulation; ++k) {
        sum += evaluator.makespan(std::span(genes.data() + k * stride, stride));
      }
    }
  }
  benchmark::DoNotOptimize(static_cast<const double&>(sum));
  state.counters["evaluations_per_s"] =
      benchmark::Counter(static_cast<double>(kPopulation) * kGenerations,
                         benchmark::Counter::kIsIterationInvariantRate);
}

void evaluate_batched(benchmark::State& state, UmpipeKernels kernels) {
  const UmpipeProblem p = problem(state.range(0) == 1);
  const auto all = populations();
  UmpipeBatchEvaluator evaluator(p, kernels);
  if (kernels == UmpipeKernels::best && !evaluator.wide()) {
    state.SetLabel("no AVX-512: portable kernels");
  }
  std::vector<double> makespans(kPopulation);
  double sum = 0;
  for (auto _ : state) {
    for (const auto& genes : all) {
      evaluator.evaluate(genes, makespans);
      sum += makespans[0];
    }
  }
  benchmark::DoNotOptimize(static_cast<const double&>(sum));
  state.counters["evaluations_per_s"] =
      benchmark::Counter(static_cast<double>(kPopulation) * kGenerations,
                         benchmark::Counter::kIsIterationInvariantRate);
}

void BM_EvaluateBatched(benchmark::State& state) {
  evaluate_batched(state, UmpipeKernels::best);
}
void BM_EvaluateBatchedPortable(benchmark::State& state) {
  evaluate_batched(state, UmpipeKernels::portable);
}

// Building the umpipe action list and simulating it, per individual: one generation per
// iteration (it is slow).
void BM_EvaluateOneByOneSimulator(benchmark::State& state) {
  const bool growing = state.range(0) == 1;
  const auto genes = populations().front();
  const std::size_t stride = umpipe_gene_words(kStages, kMinibatch);
  const schedules::SimulationCosts costs = simulation_costs(growing);
  schedules::Simulator simulator;
  double sum = 0;
  for (auto _ : state) {
    for (int k = 0; k < kPopulation; ++k) {
      const UmpipeSlices slices =
          slices_of(std::span(genes.data() + k * stride, stride), kStages, kMinibatch);
      schedules::ScheduleParams params;
      params.kind = schedules::ScheduleKind::umpipe;
      params.stages = kStages;
      params.minibatch_size = kMinibatch;
      params.forward_slices = widen(slices.forward);
      params.backward_slices = widen(slices.backward);
      sum += simulator.run(schedules::Schedule(params).materialize(), costs, false).makespan;
    }
  }
  benchmark::DoNotOptimize(static_cast<const double&>(sum));
  state.counters["evaluations_per_s"] =
      benchmark::Counter(kPopulation, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GaRun(benchmark::State& state) {
  const UmpipeProblem p = problem(true);
  UmpipeGaOptions options;
  options.population = kPopulation;
  options.generations = kGenerations;
  options.batched = state.range(0) == 1;
  double makespan = 0;
  for (auto _ : state) makespan = run_umpipe_ga(p, options).makespan;
  state.counters["makespan"] = makespan;
}

BENCHMARK(BM_EvaluateBatched)
    ->ArgName("growing_delay")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EvaluateBatchedPortable)
    ->ArgName("growing_delay")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EvaluateOneByOne)
    ->ArgName("growing_delay")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EvaluateOneByOneSimulator)
    ->ArgName("growing_delay")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GaRun)->ArgName("batched")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem::planner

int main(int argc, char** argv) {
  return tandem::bench::run_benchmarks(argc, argv, "umpipe_ga");
}
