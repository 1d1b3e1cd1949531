// The golden numbers of docs/architecture.md#simulator-and-golden-numbers, one test per row.
#include <gtest/gtest.h>

#include <string>
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

// ZB-2P, F = B = W = 1, no latency. No schedule beats m(F + B + W) + (p - 1) F: the last stage
// starts after p - 1 forwards and then has 3m units of work. p = 2, m = 4 by hand (stage 0:
// F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3; stage 1: F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3):
//   stage 1: idle [0,1], then busy to 13 (F3 waits for stage 0's F3, which ends at 6, while
//            B2 [6,7] and W0 [7,8] run; F3 [8,9], B3 [9,10], W1 W2 W3 [10,13]);
//   stage 0: busy [0,12] (B0 [3,4] right after stage 1's B0 [2,3], B3 [10,11]), W3 [11,12].
// Makespan 13 = 3m + p - 1: only the fill idles.
TEST(ScheduleGolden, ZeroBubble2PHandDerived) {
  const auto r = run(ScheduleKind::zb_2p, 2, 4, 1, 1, 0, 1);
  EXPECT_NEAR(r.makespan, 13, kTol);
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{3, 3}));
}

// From m = 2p on, ZB-2P meets that bound, with a message latency c too: the first gradient's
// round trip is covered by the 2p - 1 - 2s warm-up forwards, so only the fill, (p - 1)(F + c),
// idles. Every stage keeps 2p - 1 slices in flight (1F1B: p - s). ZB-H1 pays c on each
// forward-backward round trip of its steady state.
TEST(ScheduleGolden, ZeroBubble2PHasOnlyTheFill) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 2 * p; m <= 4 * p; ++m) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const auto r = run(ScheduleKind::zb_2p, p, m, 1, 1, 0, 1);
      EXPECT_NEAR(r.makespan, 3 * m + (p - 1), kTol);
      EXPECT_EQ(r.peak_in_flight, std::vector<int>(p, 2 * p - 1));
      EXPECT_NEAR(run(ScheduleKind::zb_2p, p, m, 1, 1, 1, 1).makespan, 3 * m + 2 * (p - 1), kTol);
    }
  }
  EXPECT_NEAR(run(ScheduleKind::zb_h1, 4, 12, 1, 1, 1, 1).makespan, 56, kTol);
  EXPECT_NEAR(run(ScheduleKind::zb_2p, 4, 12, 1, 1, 1, 1).makespan, 42, kTol);
}

ScheduleParams zb_v(int p, int m) {
  auto sp = params(ScheduleKind::zb_v, p, m);
  sp.chunks = 2;
  return sp;
}

// ZB-V with F = B = W = 1 per chunk (2 per stage, each device's two chunks taking half). The
// same bound holds: the last device holds virtual stages p - 1 and p, starts after p - 1
// chunk forwards and has 6m units of work. p = 2, m = 3 by hand (device 0 holds virtual stages
// 0 and 3, device 1 holds 1 and 2; Fc/Bc/Wc: chunk c):
//   d0: F0 F0 F0 F1 B1 W1 F1 B1 W1 B0 W0 F1 B1 W1 B0 W0 B0 W0 busy [0,18] (F1 of slice 0 at
//       [3,4] right after d1's [2,3]; B0 of slice 0 at [9,10] after d1's [8,9], ...);
//   d1: F0 F1 F0 F1 B1 W1 F0 B0 W0 F1 B1 W1 B0 B1 B0 W0 W1 W0 idle [0,1], busy [1,19].
// Makespan 19 = 6m + p - 1.
TEST(ScheduleGolden, ZeroBubbleVHandDerived) {
  const auto r = run(zb_v(2, 3), SimulationCosts::uniform(2, 2, 2, 2));
  EXPECT_NEAR(r.makespan, 19, kTol);
}

// From m = 2p - 1 on (the slices the V's warm-up needs), ZB-V meets the bound: only the fill
// idles. Each device peaks at 2p chunk activations, p stages' worth: 1F1B's first stage.
TEST(ScheduleGolden, ZeroBubbleVHasOnlyTheFill) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 2 * p - 1; m <= 4 * p; ++m) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const auto r = run(zb_v(p, m), SimulationCosts::uniform(p, 2, 2, 2));
      EXPECT_NEAR(r.makespan, 6 * m + (p - 1), kTol);
      EXPECT_EQ(r.peak_in_flight, std::vector<int>(p, 2 * p));
    }
  }
}

}  // namespace
}  // namespace tandem::schedules
