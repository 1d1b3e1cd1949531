#include "schedules/weight_versions.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/validator.hpp"

namespace tandem::schedules {
namespace {

ScheduleParams straight(ScheduleKind kind, int p) {
  ScheduleParams sp;
  sp.kind = kind;
  sp.stages = p;
  return sp;
}

// docs/architecture.md#simulator-and-golden-numbers, the PipeDream and vertical sync rows.
TEST(ScheduleWeightVersions, GoldenStraightPipeline) {
  const auto sp = straight(ScheduleKind::pipedream, 4);
  std::vector<std::int64_t> used;
  std::vector<int> kept;
  for (int s = 0; s < 4; ++s) {
    used.push_back(weight_version(sp, s, 5));
    kept.push_back(versions_kept(sp, s));
  }
  EXPECT_EQ(used, (std::vector<std::int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(kept, (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(noam(sp), 4);
  const auto vs = straight(ScheduleKind::pipedream_vsync, 4);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(weight_version(vs, s, 5), 2) << s;
}

// The delay a correction predicts across: a late minibatch b's version is b - update_delay.
TEST(ScheduleWeightVersions, UpdateDelayIsTheStalenessOfALateMinibatch) {
  for (const ScheduleKind kind :
       {ScheduleKind::pipedream, ScheduleKind::pipedream_vsync, ScheduleKind::pipedream_2bw,
        ScheduleKind::one_f_one_b, ScheduleKind::gpipe}) {
    const auto sp = straight(kind, 4);
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(weight_version(sp, s, 20), 20 - update_delay(sp, s)) << to_string(kind) << s;
    }
  }
  EXPECT_EQ(update_delay(straight(ScheduleKind::pipedream, 4), 0), 3);
  EXPECT_EQ(update_delay(straight(ScheduleKind::pipedream_vsync, 4), 3), 3);
  EXPECT_EQ(update_delay(straight(ScheduleKind::pipedream_2bw, 4), 0), 1);
  EXPECT_EQ(update_delay(straight(ScheduleKind::one_f_one_b, 4), 0), 0);
}

TEST(ScheduleWeightVersions, UnevenReplication) {
  auto sp = straight(ScheduleKind::pipedream, 3);
  sp.replicas = {2, 1, 1};
  EXPECT_EQ(warmup(sp, 0), 1);  // floor((4 - 1) / 2)
  EXPECT_EQ(warmup(sp, 1), 1);  // floor((4 - 1 - 2) / 1)
  EXPECT_EQ(warmup(sp, 2), 0);
  EXPECT_EQ(noam(sp), 2);  // ceil(R / r_0)
  // Replica rounds: minibatches 4 and 5 are the third round of stage 0.
  EXPECT_EQ(weight_version(sp, 0, 4), 1);
  EXPECT_EQ(weight_version(sp, 0, 5), 1);
}

TEST(ScheduleWeightVersions, FlushAndTwoBw) {
  EXPECT_EQ(weight_version(straight(ScheduleKind::gpipe, 4), 2, 3), 3);
  EXPECT_EQ(versions_kept(straight(ScheduleKind::one_f_one_b, 4), 0), 1);
  const auto bw = straight(ScheduleKind::pipedream_2bw, 4);
  EXPECT_EQ(weight_version(bw, 0, 0), 0);
  EXPECT_EQ(weight_version(bw, 3, 1), 0);
  EXPECT_EQ(weight_version(bw, 3, 4), 3);
  EXPECT_EQ(versions_kept(bw, 1), 2);
}

// Replays each device's order: how many STEPs precede an F is the version a stashing stage
// really runs it with, and each version lives from its STEP to its last use. The rules must
// match the generated orders exactly (not just bound them).
struct Replay {
  std::map<std::pair<int, std::int64_t>, std::int64_t> forward_version;  // (stage, mb)
  std::vector<int> max_alive;                                            // per device
};

Replay replay(const ActionList& list) {
  Replay out;
  for (std::size_t d = 0; d < list.devices.size(); ++d) {
    const auto& actions = list.devices[d];
    const int stage = list.params.stage_of(static_cast<int>(d));
    std::map<std::int64_t, std::size_t> last_use;
    std::int64_t steps = 0;
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (a.op == Op::STEP) ++steps;
      if (a.op == Op::F) out.forward_version[{stage, a.minibatch}] = steps;
      if (a.op == Op::F || a.op == Op::B || a.op == Op::W) {
        last_use[weight_version(list.params, stage, a.minibatch)] = i;
      }
    }
    int best = 0;
    steps = 0;
    for (std::size_t i = 0; i < actions.size(); ++i) {
      if (actions[i].op == Op::STEP) ++steps;
      int alive = 0;
      for (std::int64_t v = 0; v <= steps; ++v) {
        const bool used_later = last_use.count(v) && last_use[v] > i;
        if (v == steps || used_later) ++alive;
      }
      best = std::max(best, alive);
    }
    out.max_alive.push_back(best);
  }
  return out;
}

TEST(ScheduleWeightVersions, StashingMatchesTheGeneratedOrder) {
  for (const std::vector<int>& replicas :
       {std::vector<int>{1, 1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {3, 1, 1, 1}, {1, 1, 3}}) {
    ScheduleParams sp = straight(ScheduleKind::pipedream, static_cast<int>(replicas.size()));
    sp.replicas = replicas;
    sp.minibatches = 40;
    const ActionList list = Schedule(sp).materialize();
    validate(list);
    const Replay r = replay(list);
    for (const auto& [key, seen] : r.forward_version) {
      EXPECT_EQ(seen, weight_version(sp, key.first, key.second))
          << "stage " << key.first << " minibatch " << key.second;
    }
    for (std::size_t d = 0; d < list.devices.size(); ++d) {
      EXPECT_EQ(r.max_alive[d], versions_kept(sp, sp.stage_of(static_cast<int>(d)))) << d;
    }
  }
}

TEST(ScheduleWeightVersions, VerticalSyncAndTwoBwKeepWhatTheyClaim) {
  for (auto kind : {ScheduleKind::pipedream_vsync, ScheduleKind::pipedream_2bw}) {
    for (int p = 1; p <= 5; ++p) {
      ScheduleParams sp = straight(kind, p);
      if (kind == ScheduleKind::pipedream_2bw) sp.slices = p + 1;
      sp.minibatches = 30;
      const ActionList list = Schedule(sp).materialize();
      validate(list);
      const Replay r = replay(list);
      for (const auto& [key, seen] : r.forward_version) {
        EXPECT_LE(weight_version(sp, key.first, key.second), seen);
      }
      for (int s = 0; s < p; ++s) EXPECT_EQ(r.max_alive[s], versions_kept(sp, s)) << p << s;
    }
  }
}

}  // namespace
}  // namespace tandem::schedules
