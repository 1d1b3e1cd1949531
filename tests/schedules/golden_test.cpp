// The golden numbers of docs/architecture.md#simulator-and-golden-numbers, one test per row.
#include <gtest/gtest.h>

#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/simulator.hpp"
#include "schedules/validator.hpp"

namespace tandem::schedules {
namespace {

constexpr double kTol = 1e-9;

ScheduleParams params(ScheduleKind kind, int p, int m) {
  ScheduleParams sp;
  sp.kind = kind;
  sp.stages = p;
  sp.slices = m;
  return sp;
}

SimulationResult run(const ScheduleParams& sp, const SimulationCosts& costs) {
  const ActionList list = Schedule(sp).materialize();
  validate(list);
  return simulate(list, costs);
}

SimulationResult run(ScheduleKind kind, int p, int m, double tf, double tb, double c = 0,
                     double tw = 0) {
  return run(params(kind, p, m), SimulationCosts::uniform(p, tf, tb, tw, c));
}

TEST(ScheduleGolden, GPipeP4M8) {
  const auto r = run(ScheduleKind::gpipe, 4, 8, 1, 2);
  EXPECT_NEAR(r.makespan, 33, kTol);  // (m + p - 1)(t_f + t_b)
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{8, 8, 8, 8}));
}

TEST(ScheduleGolden, OneFOneBP4M8) {
  const auto r = run(ScheduleKind::one_f_one_b, 4, 8, 1, 2);
  EXPECT_NEAR(r.makespan, 33, kTol);
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{4, 3, 2, 1}));
}

TEST(ScheduleGolden, SmallSliceCounts) {
  const double expected[] = {12, 15, 18};
  for (int m = 1; m <= 3; ++m) {
    EXPECT_NEAR(run(ScheduleKind::one_f_one_b, 4, m, 1, 2).makespan, expected[m - 1], kTol) << m;
    EXPECT_NEAR(run(ScheduleKind::gpipe, 4, m, 1, 2).makespan, expected[m - 1], kTol) << m;
  }
}

TEST(ScheduleGolden, DelayOnEveryEdge) {
  EXPECT_NEAR(run(ScheduleKind::gpipe, 4, 8, 1, 2, 0.5).makespan, 36, kTol);
  EXPECT_NEAR(run(ScheduleKind::gpipe, 4, 8, 1, 2, 1).makespan, 39, kTol);
  // 1F1B in its strict order waits for each gradient before its next forward.
  EXPECT_NEAR(run(ScheduleKind::one_f_one_b, 4, 8, 1, 2, 0.5).makespan, 41, kTol);
  EXPECT_NEAR(run(ScheduleKind::one_f_one_b, 4, 8, 1, 2, 1).makespan, 49, kTol);
}

TEST(ScheduleGolden, TwoStagesThreeSlicesWithDelay) {
  EXPECT_NEAR(run(ScheduleKind::gpipe, 2, 3, 1, 2, 1).makespan, 14, kTol);
  EXPECT_NEAR(run(ScheduleKind::one_f_one_b, 2, 3, 1, 2, 1).makespan, 16, kTol);
}

TEST(ScheduleGolden, UnevenStages) {
  SimulationCosts costs;
  const double tf[] = {1, 2, 1, 1};
  const double tb[] = {2, 4, 2, 2};
  for (int s = 0; s < 4; ++s) {
    StageCosts c;
    c.forward = tf[s];
    c.backward = tb[s];
    costs.stages.push_back(c);
  }
  EXPECT_NEAR(run(params(ScheduleKind::gpipe, 4, 8), costs).makespan, 57, kTol);
  EXPECT_NEAR(run(params(ScheduleKind::one_f_one_b, 4, 8), costs).makespan, 53, kTol);
}

TEST(ScheduleGolden, Interleaved) {
  auto sp = params(ScheduleKind::interleaved, 4, 8);
  sp.chunks = 2;
  const auto v2 = run(sp, SimulationCosts::uniform(4, 1, 2));
  EXPECT_NEAR(v2.makespan, 28.5, kTol);
  EXPECT_EQ(v2.peak_in_flight, (std::vector<int>{11, 9, 7, 5}));
  sp.chunks = 4;
  EXPECT_NEAR(run(sp, SimulationCosts::uniform(4, 1, 2)).makespan, 26.25, kTol);
}

TEST(ScheduleGolden, ZeroBubbleH1) {
  const auto r = run(ScheduleKind::zb_h1, 4, 8, 1, 1, 0, 1);
  EXPECT_NEAR(r.makespan, 27, kTol);
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{4, 4, 4, 4}));
  EXPECT_NEAR(run(ScheduleKind::zb_h1, 4, 8, 1, 1, 0, 0.5).makespan, 24.5, kTol);
}

}  // namespace
}  // namespace tandem::schedules
