// The pass that marks where a backward may write its round's update in place: exactly the B
// that is its round's only contribution on its device with the round's STEP right after it.
#include "schedules/in_place_updates.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "schedules/schedule.hpp"

namespace tandem::schedules {
namespace {

ScheduleParams params(ScheduleKind kind, int p, int m, std::vector<int> replicas = {}) {
  ScheduleParams sp;
  sp.kind = kind;
  sp.stages = p;
  sp.slices = m;
  sp.minibatches = 3;
  if (!replicas.empty()) sp.replicas = std::move(replicas);
  return sp;
}

// Device d's actions through the pass.
std::vector<Action> lowered(const std::vector<Action>& actions) {
  InPlaceUpdates pass([&actions, i = std::size_t{0}]() mutable -> std::optional<Action> {
    if (i == actions.size()) return std::nullopt;
    return actions[i++];
  });
  std::vector<Action> out;
  while (auto a = pass.next()) out.push_back(*a);
  return out;
}

// How many actions of each device the pass marked; it changes nothing else.
std::vector<int> marks(const ScheduleParams& sp) {
  const auto list = Schedule(sp).materialize();
  std::vector<int> out;
  for (const auto& device : list.devices) {
    const std::vector<Action> got = lowered(device);
    EXPECT_EQ(got.size(), device.size());
    int n = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      Action unmarked = got[i];
      unmarked.update_in_place = false;
      EXPECT_EQ(unmarked, device[i]) << to_string(device[i]);
      if (!got[i].update_in_place) continue;
      ++n;
      EXPECT_EQ(got[i].op, Op::B);
      EXPECT_TRUE(got[i].with_weight);
      EXPECT_TRUE(i + 1 < got.size() && got[i + 1].op == Op::STEP) << to_string(got[i]);
    }
    out.push_back(n);
  }
  return out;
}

TEST(InPlaceUpdates, OneBackwardPerRoundWithItsStepNextIsMarked) {
  // GPipe with one slice: every round is F, B, STEP on every device.
  EXPECT_EQ(marks(params(ScheduleKind::gpipe, 2, 1)), (std::vector<int>{3, 3}));
  // PipeDream's last stage runs B then STEP for every minibatch.
  EXPECT_EQ(marks(params(ScheduleKind::pipedream, 3, 1)).back(), 3);
}

TEST(InPlaceUpdates, SeveralContributionsSplitBackwardsOrASyncRuleItOut) {
  // Two slices: the round's second B follows the first.
  EXPECT_EQ(marks(params(ScheduleKind::one_f_one_b, 2, 2)), (std::vector<int>{0, 0}));
  // ZB-H1: B computes no weight gradient, W does.
  EXPECT_EQ(marks(params(ScheduleKind::zb_h1, 2, 1)), (std::vector<int>{0, 0}));
  // A replicated stage reduces its gradient (SYNC) before its STEP.
  const std::vector<int> replicated = marks(params(ScheduleKind::gpipe, 2, 1, {2, 1}));
  EXPECT_EQ(replicated[0], 0);
  EXPECT_EQ(replicated[1], 0);
}

}  // namespace
}  // namespace tandem::schedules
