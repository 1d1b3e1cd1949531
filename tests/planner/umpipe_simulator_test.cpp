// The planner's UMPIPE makespans against the schedules' discrete-event simulator, which runs
// the umpipe action list with the same costs: two independent implementations of UMPIPE's
// rules (docs/architecture.md#schedules).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "planner/umpipe_batch_evaluator.hpp"
#include "planner/umpipe_evaluator.hpp"
#include "planner/umpipe_problem.hpp"
#include "schedules/schedule.hpp"
#include "schedules/simulator.hpp"
#include "umpipe_reference.hpp"

namespace tandem::planner {
namespace {

using schedules::Cost;

std::vector<std::vector<std::int64_t>> widen(const std::vector<std::vector<int>>& rows) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& row : rows) out.emplace_back(row.begin(), row.end());
  return out;
}

std::vector<int> random_composition(std::mt19937& rng, int samples, double density) {
  std::vector<int> sizes;
  int begin = 0;
  for (int i = 0; i < samples; ++i) {
    if (i + 1 == samples || std::bernoulli_distribution(density)(rng)) {
      sizes.push_back(i + 1 - begin);
      begin = i + 1;
    }
  }
  return sizes;
}

TEST(UmpipeVersusSimulator, RandomInstancesAgree) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> value(0.0, 3.0);
  for (int trial = 0; trial < 150; ++trial) {
    const int stages = 1 + trial % 6;
    const int samples = 1 + (trial * 13) % 48;
    // The simulator's messages take latency + output_bytes * b / bandwidth: per boundary, affine
    // in the slice size.
    const double latency = trial % 3 == 0 ? 0.0 : value(rng);
    schedules::SimulationCosts costs;
    costs.latency = latency;
    costs.bandwidth = 2.0;
    // STEP ends the minibatch after the last backward; the evaluators stop at that backward.
    costs.step = trial % 4 == 1 ? value(rng) : 0.0;
    UmpipeProblem problem;
    problem.minibatch = samples;
    for (int s = 0; s < stages; ++s) {
      const double f0 = value(rng), f1 = value(rng), b0 = value(rng), b1 = value(rng);
      const double bytes = trial % 2 == 0 ? 0.0 : value(rng);
      // UMPIPE does not split B: the simulator's B takes backward + weight.
      const double w0 = trial % 3 == 2 ? value(rng) : 0.0;
      const double w1 = trial % 3 == 2 ? value(rng) : 0.0;
      problem.stages.push_back({Cost::affine(f0, f1), Cost::affine(b0 + w0, b1 + w1)});
      schedules::StageCosts stage;
      stage.forward = Cost::affine(f0, f1);
      stage.backward = Cost::affine(b0, b1);
      stage.weight = Cost::affine(w0, w1);
      stage.output_bytes = bytes;
      costs.stages.push_back(stage);
      if (s + 1 < stages) {
        problem.links.push_back(Cost::affine(latency, bytes / costs.bandwidth));
      }
    }
    const double density = 0.05 + 0.9 * rng() / static_cast<double>(rng.max());
    UmpipeSlices slices;
    for (int s = 0; s < stages; ++s) {
      slices.forward.push_back(random_composition(rng, samples, density));
      slices.backward.push_back(random_composition(rng, samples, density));
    }

    schedules::ScheduleParams params;
    params.kind = schedules::ScheduleKind::umpipe;
    params.stages = stages;
    params.minibatch_size = samples;
    params.forward_slices = widen(slices.forward);
    params.backward_slices = widen(slices.backward);
    const double simulated =
        schedules::simulate(schedules::Schedule(params).materialize(), costs, false).makespan -
        costs.step;

    SCOPED_TRACE("trial " + std::to_string(trial));
    EXPECT_NEAR(umpipe_makespan(problem, slices), simulated, 1e-9 * simulated);
    EXPECT_NEAR(testing::reference_makespan(problem, slices), simulated, 1e-9 * simulated);
    UmpipeEvaluator evaluator(problem);
    EXPECT_NEAR(evaluator.makespan(cuts_of(slices, samples)), simulated, 1e-9 * simulated);
    std::vector<double> batched(1);
    UmpipeBatchEvaluator batch(problem);
    batch.evaluate(cuts_of(slices, samples), batched);
    EXPECT_NEAR(batched[0], simulated, 1e-9 * simulated);
  }
}

TEST(UmpipeVersusSimulator, GoldenSchedule) {
  schedules::ScheduleParams params;
  params.kind = schedules::ScheduleKind::umpipe;
  params.stages = 2;
  params.minibatch_size = 4;
  params.forward_slices = {{1, 3}, {1, 3}};
  params.backward_slices = {{3, 1}, {3, 1}};
  schedules::SimulationCosts costs;
  costs.stages.resize(2);
  costs.stages[0].forward = schedules::Cost::affine(0, 1);
  costs.stages[0].backward = schedules::Cost::affine(0, 2);
  costs.stages[1].forward = schedules::Cost::affine(2, 0.5);
  costs.stages[1].backward = schedules::Cost::affine(4, 1);
  EXPECT_DOUBLE_EQ(
      schedules::simulate(schedules::Schedule(params).materialize(), costs, false).makespan, 22.5);
}

}  // namespace
}  // namespace tandem::planner
