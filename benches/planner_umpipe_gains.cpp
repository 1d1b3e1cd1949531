// What unequal slices buy: on GPT- and VGG16-like layer costs (per-sample work plus per-slice
// fixed overheads, activations crossing 12.5 GB/s links), cut into 4..8 stages by the min-max
// partitioner, the UMPIPE GA's plan against the best equal-slice GPipe and 1F1B plans (every
// slice count 1..B tried), all timed by the schedules' simulator. Counters: makespans in ms
// and gain = best equal-slice makespan / UMPIPE's (above 1: UMPIPE is faster). The timed part
// is the GA itself.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "benches/json_line_reporter.hpp"
#include "planner/gpipe_partitioner.hpp"
#include "planner/umpipe_baselines.hpp"
#include "planner/umpipe_ga.hpp"
#include "schedules/schedule.hpp"
#include "schedules/simulator.hpp"

namespace tandem::planner {
namespace {

constexpr int kMinibatch = 64;
constexpr double kBytesPerMs = 12.5e6;  // 12.5 GB/s
constexpr double kLatencyMs = 0.02;

// Per layer: forward and backward as fixed + per_sample * b (ms), output bytes per sample.
struct Layer {
  double f_fixed, f_sample, b_fixed, b_sample, out_bytes;
};

// GPT-style, 14 blocks (d=1024, seq 512, bf16 activations): embedding, blocks, LM head.
std::vector<Layer> gpt14() {
  std::vector<Layer> layers{{0.02, 0.004, 0.03, 0.008, 1 << 20}};
  for (int i = 0; i < 14; ++i) layers.push_back({0.15, 0.35, 0.25, 0.70, 1 << 20});
  layers.push_back({0.10, 0.90, 0.15, 1.80, 4});
  return layers;
}

// VGG16 on 224x224 fp32 images: 13 convolutions (a block's pooling folded into its last
// convolution) at about 7.5 GMAC/ms, then three fully connected layers whose weights (411,
// 67 and 16 MB) must be read once per slice whatever its size: their fixed costs dominate.
std::vector<Layer> vgg16() {
  const double gmac[] = {0.087, 1.85, 0.925, 1.85,  0.925, 1.85, 1.85,
                         0.925, 1.85, 1.85,  0.462, 0.462, 0.462};
  const double out_mb[] = {12.8, 3.2, 6.4, 1.6, 3.2, 3.2, 0.8, 1.6, 1.6, 0.4, 0.4, 0.4, 0.1};
  std::vector<Layer> layers;
  for (int i = 0; i < 13; ++i) {
    const double ms = gmac[i] / 7.5;
    layers.push_back({0.05, ms, 0.08, 2 * ms, out_mb[i] * 1e6});
  }
  layers.push_back({0.46, 0.014, 0.92, 0.028, 16384});
  layers.push_back({0.075, 0.0022, 0.15, 0.0045, 16384});
  layers.push_back({0.018, 0.0005, 0.036, 0.0011, 4000});
  return layers;
}

struct Pipeline {
  UmpipeProblem problem;
  schedules::SimulationCosts costs;
};

// Balances f + b over the whole minibatch, then sums each stage's layers.
Pipeline cut(const std::vector<Layer>& layers, int stages) {
  std::vector<double> weight;
  for (const Layer& l : layers) {
    weight.push_back(l.f_fixed + l.b_fixed + (l.f_sample + l.b_sample) * kMinibatch);
  }
  const ContiguousPartition partition = partition_min_max(weight, stages);
  Pipeline p;
  p.problem.minibatch = kMinibatch;
  p.costs.latency = kLatencyMs;
  p.costs.bandwidth = kBytesPerMs;
  int begin = 0;
  for (const int end : partition.ends) {
    Layer sum{0, 0, 0, 0, layers[end - 1].out_bytes};
    for (int l = begin; l < end; ++l) {
      sum.f_fixed += layers[l].f_fixed;
      sum.f_sample += layers[l].f_sample;
      sum.b_fixed += layers[l].b_fixed;
      sum.b_sample += layers[l].b_sample;
    }
    p.problem.stages.push_back({schedules::Cost::affine(sum.f_fixed, sum.f_sample),
                                schedules::Cost::affine(sum.b_fixed, sum.b_sample)});
    if (end < static_cast<int>(layers.size())) {
      p.problem.links.push_back(schedules::Cost::affine(kLatencyMs, sum.out_bytes / kBytesPerMs));
    }
    schedules::StageCosts stage;
    stage.forward = schedules::Cost::affine(sum.f_fixed, sum.f_sample);
    stage.backward = schedules::Cost::affine(sum.b_fixed, sum.b_sample);
    stage.output_bytes = sum.out_bytes;
    p.costs.stages.push_back(stage);
    begin = end;
  }
  return p;
}

double simulate(const Pipeline& p, schedules::ScheduleParams params) {
  params.stages = p.problem.stage_count();
  params.minibatch_size = kMinibatch;
  return schedules::simulate(schedules::Schedule(params).materialize(), p.costs, false).makespan;
}

// The best of slice counts 1..B with equal slices.
std::pair<double, int> best_equal(const Pipeline& p, schedules::ScheduleKind kind) {
  std::pair<double, int> best{std::numeric_limits<double>::infinity(), 0};
  for (int m = 1; m <= kMinibatch; ++m) {
    schedules::ScheduleParams params;
    params.kind = kind;
    params.slices = m;
    best = std::min(best, {simulate(p, params), m});
  }
  return best;
}

double simulate_umpipe(const Pipeline& p, const UmpipeSlices& slices) {
  schedules::ScheduleParams params;
  params.kind = schedules::ScheduleKind::umpipe;
  for (const auto& row : slices.forward) params.forward_slices.emplace_back(row.begin(), row.end());
  for (const auto& row : slices.backward) {
    params.backward_slices.emplace_back(row.begin(), row.end());
  }
  return simulate(p, params);
}

void BM_Gains(benchmark::State& state) {
  const bool vgg = state.range(0) == 1;
  const int stages = static_cast<int>(state.range(1));
  const Pipeline p = cut(vgg ? vgg16() : gpt14(), stages);
  UmpipeGaOptions options;
  options.population = 64;
  options.generations = 200;
  UmpipeGaResult result;
  for (auto _ : state) result = run_umpipe_ga(p.problem, options);

  const auto [gpipe, gpipe_m] = best_equal(p, schedules::ScheduleKind::gpipe);
  const auto [one_f_one_b, one_f_one_b_m] = best_equal(p, schedules::ScheduleKind::one_f_one_b);
  const double umpipe = simulate_umpipe(p, result.slices);
  state.counters["gpipe_ms"] = gpipe;
  state.counters["gpipe_m"] = gpipe_m;
  state.counters["1f1b_ms"] = one_f_one_b;
  state.counters["1f1b_m"] = one_f_one_b_m;
  state.counters["umpipe_ms"] = umpipe;
  state.counters["local_greedy_ms"] = local_greedy_slices(p.problem).makespan;
  state.counters["global_greedy_ms"] = global_greedy_slices(p.problem).makespan;
  state.counters["gain"] = std::min(gpipe, one_f_one_b) / umpipe;
  // The GA's own makespan must be what the simulator says: one cost model throughout.
  state.counters["model_error"] = std::abs(result.makespan - umpipe);
  state.SetLabel(std::string(vgg ? "vgg16" : "gpt14") + " P=" + std::to_string(stages));
}

BENCHMARK(BM_Gains)
    ->ArgNames({"vgg", "stages"})
    ->ArgsProduct({{0, 1}, {4, 6, 8}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace tandem::planner

int main(int argc, char** argv) {
  return tandem::bench::run_benchmarks(argc, argv, "umpipe_gains");
}
