// PipeDream's partitioning DP on a 256-layer chain: two levels (8 workers x 16 hosts, as in
// PipeDream's own hierarchical optimizer, which takes 89.5 s on this machine for the same
// shape; goal <= 50 ms) and three levels (4 x 8 x 4; 1024 layers: goal < 5 s). The same
// shapes with CostModel::pipedream (PipeDream's optimizer's objective, unpruned) for scale.
#include <benchmark/benchmark.h>

#include <vector>

#include "benches/json_line_reporter.hpp"
#include "planner/pipedream_dp.hpp"
#include "runtime/counter_rng.hpp"

namespace tandem::planner {
namespace {

constexpr double kGBps = 1e6;  // bytes per ms

std::vector<PipeDreamLayer> chain(int n) {
  auto rng = RngStream::from_seed(2024);
  std::vector<PipeDreamLayer> layers(n);
  for (PipeDreamLayer& layer : layers) {
    layer.compute_ms = 0.5 + 4.0 * rng.uniform();
    layer.parameter_bytes = 1e6 + 3e7 * rng.uniform();
    layer.activation_bytes = 1e5 + 2e7 * rng.uniform();
    layer.memory_bytes = layer.activation_bytes * 2;
  }
  return layers;
}

void run(benchmark::State& state, const std::vector<PipeDreamLevel>& levels, bool bounded,
         CostModel model = CostModel::overlapped) {
  const auto layers = chain(static_cast<int>(state.range(0)));
  PipeDreamOptions options;
  options.cost_model = model;
  if (bounded) options.memory_per_worker = 16e9;
  PipeDreamPlan plan;
  for (auto _ : state) {
    plan = plan_pipedream(layers, levels, options);
    // The const overload: benchmark 1.7's read-write DoNotOptimize can corrupt a double.
    benchmark::DoNotOptimize(static_cast<const PipeDreamPlan&>(plan));
  }
  state.counters["time_per_minibatch_ms"] = plan.time_per_minibatch;
  state.counters["stages"] = static_cast<double>(plan.stages.size());
  state.counters["workers_used"] = plan.workers_used();
}

void BM_TwoLevels(benchmark::State& state) {
  run(state, {{8, 150 * kGBps}, {16, 12.5 * kGBps}}, state.range(1) == 1);
}

void BM_ThreeLevels(benchmark::State& state) {
  run(state, {{4, 150 * kGBps}, {8, 25 * kGBps}, {4, 5 * kGBps}}, state.range(1) == 1);
}

void BM_Flat(benchmark::State& state) {
  run(state, {{16, 12.5 * kGBps}}, state.range(1) == 1);
}

void BM_TwoLevelsPipeDreamModel(benchmark::State& state) {
  run(state, {{8, 150 * kGBps}, {16, 12.5 * kGBps}}, false, CostModel::pipedream);
}

BENCHMARK(BM_TwoLevels)
    ->ArgNames({"layers", "memory_bound"})
    ->Args({256, 0})
    ->Args({256, 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ThreeLevels)
    ->ArgNames({"layers", "memory_bound"})
    ->Args({256, 0})
    ->Args({256, 1})
    ->Args({1024, 0})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Flat)
    ->ArgNames({"layers", "memory_bound"})
    ->Args({256, 0})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TwoLevelsPipeDreamModel)
    ->ArgNames({"layers"})
    ->Args({256})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem::planner

int main(int argc, char** argv) {
  return tandem::bench::run_benchmarks(argc, argv, "planner_dp");
}
