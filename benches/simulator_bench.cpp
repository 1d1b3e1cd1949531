// The discrete-event simulator: actions timed per second (goal: >= 5 M/s) on generated
// schedules, timeline off (the planner's use) and on; the validator. (The planner's UMPIPE
// evaluators have their own benchmark, planner_umpipe_ga.cpp.)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "benches/json_line_reporter.hpp"
#include "schedules/schedule.hpp"
#include "schedules/simulator.hpp"
#include "schedules/validator.hpp"

namespace tandem::schedules {
namespace {

ActionList make(ScheduleKind kind, int p, int m, int chunks = 1, std::vector<int> replicas = {},
                std::int64_t minibatches = 1) {
  ScheduleParams sp;
  sp.kind = kind;
  sp.stages = p;
  sp.slices = m;
  sp.chunks = chunks;
  sp.replicas = std::move(replicas);
  sp.minibatches = minibatches;
  return Schedule(sp).materialize();
}

SimulationCosts costs(int p) {
  SimulationCosts c;
  for (int s = 0; s < p; ++s) {
    StageCosts st;
    st.forward = Cost::affine(0.1 * (s % 3), 1.0);
    st.backward = Cost::affine(0.2, 2.0);
    st.weight = Cost::affine(0.0, 1.0);
    st.output_bytes = 4;
    c.stages.push_back(st);
  }
  c.latency = 0.5;
  c.bandwidth = 16;
  return c;
}

void run_simulator(benchmark::State& state, const ActionList& list, bool timeline) {
  Simulator sim;
  const SimulationCosts c = costs(list.params.stages);
  for (auto _ : state) {
    const SimulationResult& result = sim.run(list, c, timeline);
    benchmark::DoNotOptimize(&result);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(list.size()));
  state.counters["actions"] = static_cast<double>(list.size());
  state.counters["makespan"] = sim.run(list, c, false).makespan;
}

void BM_Simulate(benchmark::State& state, ActionList list, bool timeline) {
  run_simulator(state, list, timeline);
}

void BM_Validate(benchmark::State& state, ActionList list) {
  for (auto _ : state) validate(list);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(list.size()));
}

BENCHMARK_CAPTURE(BM_Simulate, one_f_one_b_p8_m512, make(ScheduleKind::one_f_one_b, 8, 512), false);
BENCHMARK_CAPTURE(BM_Simulate, one_f_one_b_p16_m4096, make(ScheduleKind::one_f_one_b, 16, 4096),
                  false);
BENCHMARK_CAPTURE(BM_Simulate, one_f_one_b_p16_m4096_timeline,
                  make(ScheduleKind::one_f_one_b, 16, 4096), true);
BENCHMARK_CAPTURE(BM_Simulate, gpipe_p16_m4096, make(ScheduleKind::gpipe, 16, 4096), false);
BENCHMARK_CAPTURE(BM_Simulate, interleaved_p8_v4_m1024, make(ScheduleKind::interleaved, 8, 1024, 4),
                  false);
BENCHMARK_CAPTURE(BM_Simulate, zb_h1_p8_m2048, make(ScheduleKind::zb_h1, 8, 2048), false);
BENCHMARK_CAPTURE(BM_Simulate, pipedream_2_1_1_n50000,
                  make(ScheduleKind::pipedream, 3, 1, 1, {2, 1, 1}, 50000), false);
BENCHMARK_CAPTURE(BM_Validate, one_f_one_b_p16_m4096, make(ScheduleKind::one_f_one_b, 16, 4096));

}  // namespace
}  // namespace tandem::schedules

int main(int argc, char** argv) {
  return tandem::bench::run_benchmarks(argc, argv, "simulator");
}
