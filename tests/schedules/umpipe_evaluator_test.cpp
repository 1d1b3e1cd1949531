#include "schedules/umpipe_evaluator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/simulator.hpp"

namespace tandem::schedules {
namespace {

using Comp = std::vector<std::int64_t>;

std::vector<Comp> compositions(std::int64_t n) {
  std::vector<Comp> out;
  for (std::uint32_t cuts = 0; cuts < (1u << (n - 1)); ++cuts) {
    Comp c{1};
    for (std::int64_t i = 0; i + 1 < n; ++i) {
      if (cuts & (1u << i)) {
        c.push_back(1);
      } else {
        ++c.back();
      }
    }
    out.push_back(c);
  }
  return out;
}

// DESIGN section 7: P=2, B=4, f1=b, g1=2b, f2=2+b/2, g2=4+b, c=0.
UmpipeEvaluator golden() {
  return UmpipeEvaluator(4, {Cost::affine(0, 1), Cost::affine(2, 0.5)},
                         {Cost::affine(0, 2), Cost::affine(4, 1)});
}

TEST(ScheduleUmpipeEvaluator, GoldenOptimum) {
  auto eval = golden();
  EXPECT_NEAR(eval.makespan({{1, 3}, {1, 3}}, {{3, 1}, {3, 1}}), 22.5, 1e-9);
  EXPECT_NEAR(eval.makespan({{2, 2}, {2, 2}}, {{2, 2}, {2, 2}}), 24, 1e-9);
  // Exhaustively: 22.5 is the optimum; the best single composition everywhere gives 24.
  const auto all = compositions(4);
  double best = std::numeric_limits<double>::infinity();
  double best_single = best;
  for (const auto& f0 : all) {
    for (const auto& f1 : all) {
      for (const auto& b0 : all) {
        for (const auto& b1 : all) best = std::min(best, eval.makespan({f0, f1}, {b0, b1}));
      }
    }
    best_single = std::min(best_single, eval.makespan({f0, f0}, {f0, f0}));
  }
  EXPECT_NEAR(best, 22.5, 1e-9);
  EXPECT_NEAR(best_single, 24, 1e-9);
}

TEST(ScheduleUmpipeEvaluator, AgreesWithTheSimulatorOnTheGolden) {
  ScheduleParams sp;
  sp.kind = ScheduleKind::umpipe;
  sp.stages = 2;
  sp.forward_slices = {{1, 3}, {1, 3}};
  sp.backward_slices = {{3, 1}, {3, 1}};
  SimulationCosts costs;
  costs.stages.resize(2);
  costs.stages[0].forward = Cost::affine(0, 1);
  costs.stages[0].backward = Cost::affine(0, 2);
  costs.stages[1].forward = Cost::affine(2, 0.5);
  costs.stages[1].backward = Cost::affine(4, 1);
  EXPECT_NEAR(simulate(Schedule(sp).materialize(), costs).makespan, 22.5, 1e-9);
}

TEST(ScheduleUmpipeEvaluator, RejectsBadSlicings) {
  auto eval = golden();
  EXPECT_THROW(eval.makespan({{1, 2}, {4}}, {{4}, {4}}), ScheduleError);
  EXPECT_THROW(eval.makespan({{4}, {0, 4}}, {{4}, {4}}), ScheduleError);
  EXPECT_THROW(eval.makespan({{4}}, {{4}}), ScheduleError);
  EXPECT_THROW(UmpipeEvaluator(4, {Cost{}}, {}), ScheduleError);
}

}  // namespace
}  // namespace tandem::schedules
