#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/text_form.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::schedules {
namespace {

ScheduleParams params(ScheduleKind kind, int p, int m) {
  ScheduleParams sp;
  sp.kind = kind;
  sp.stages = p;
  sp.slices = m;
  return sp;
}

std::vector<std::string> tokens(const ScheduleParams& sp, const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (const auto& a : actions) out.push_back(format_action(sp, a));
  return out;
}

// 1F1B by the rule of docs/architecture.md#schedules, built independently: w = min(p-1-s, m)
// forwards, pairs (F(i+w), B(i)), the remaining backwards, STEP.
std::vector<std::string> one_f_one_b_rule(int p, int m, int s) {
  const int w = std::min(p - 1 - s, m);
  std::vector<std::string> out;
  for (int i = 0; i < w; ++i) out.push_back("F" + std::to_string(i));
  for (int i = 0; i + w < m; ++i) {
    out.push_back("F" + std::to_string(i + w));
    out.push_back("B" + std::to_string(i));
  }
  for (int i = std::max(0, m - w); i < m; ++i) out.push_back("B" + std::to_string(i));
  out.push_back("STEP");
  return out;
}

TEST(ScheduleGenerators, OneFOneBFollowsTheRule) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = 1; m <= 7; ++m) {
      const auto sp = params(ScheduleKind::one_f_one_b, p, m);
      const auto list = Schedule(sp).materialize();
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(tokens(sp, list.devices[s]), one_f_one_b_rule(p, m, s)) << p << m << s;
      }
    }
  }
}

TEST(ScheduleGenerators, GPipeAndNaive) {
  const auto gp = params(ScheduleKind::gpipe, 2, 3);
  EXPECT_EQ(tokens(gp, Schedule(gp).materialize().devices[1]),
            (std::vector<std::string>{"F0", "F1", "F2", "B0", "B1", "B2", "STEP"}));
  const auto nv = params(ScheduleKind::naive, 2, 2);
  EXPECT_EQ(tokens(nv, Schedule(nv).materialize().devices[0]),
            (std::vector<std::string>{"F0", "B0", "F1", "B1", "STEP"}));
}

TEST(ScheduleGenerators, SeveralMinibatchesRepeatTheFlush) {
  auto sp = params(ScheduleKind::gpipe, 2, 2);
  sp.minibatches = 2;
  EXPECT_EQ(
      tokens(sp, Schedule(sp).materialize().devices[0]),
      (std::vector<std::string>{"F0", "F1", "B0", "B1", "STEP", "F2", "F3", "B2", "B3", "STEP"}));
}

TEST(ScheduleGenerators, ZeroBubbleDelaysWeightGradients) {
  const auto sp = params(ScheduleKind::zb_h1, 4, 8);
  const auto list = Schedule(sp).materialize();
  for (int s = 0; s < 4; ++s) {
    const auto& acts = list.devices[s];
    // W(i) comes right after B(i + s) while there is one.
    for (std::size_t k = 0; k + 1 < acts.size(); ++k) {
      if (acts[k].op != Op::B) continue;
      const std::int64_t i = acts[k].slice.begin - s;
      if (i >= 0) {
        EXPECT_EQ(acts[k + 1].op, Op::W);
        EXPECT_EQ(acts[k + 1].slice.begin, i);
      }
    }
    EXPECT_EQ(std::count_if(acts.begin(), acts.end(), [](auto& a) { return a.op == Op::W; }), 8);
  }
}

TEST(ScheduleGenerators, InterleavedNeedsWholeRoundsOfSlices) {
  auto sp = params(ScheduleKind::interleaved, 4, 6);
  sp.chunks = 2;
  try {
    Schedule{sp};
    FAIL() << "m = 6, p = 4 accepted";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of stages"), std::string::npos) << e.what();
  }
}

TEST(ScheduleGenerators, InterleavedVisitsEveryChunkOfEverySlice) {
  auto sp = params(ScheduleKind::interleaved, 2, 4);
  sp.chunks = 3;
  const auto list = Schedule(sp).materialize();
  for (const auto& acts : list.devices) {
    for (Op op : {Op::F, Op::B}) {
      std::vector<std::pair<int, std::int64_t>> seen;
      for (const auto& a : acts) {
        if (a.op == op) seen.emplace_back(a.chunk, a.slice.begin);
      }
      std::sort(seen.begin(), seen.end());
      ASSERT_EQ(seen.size(), 12u);
      EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
    }
  }
}

TEST(ScheduleGenerators, PipeDreamIsUnboundedAndAlternates) {
  auto sp = params(ScheduleKind::pipedream, 4, 1);
  sp.minibatches = 0;
  const Schedule schedule(sp);
  EXPECT_FALSE(schedule.finite());
  EXPECT_THROW(schedule.materialize(), ScheduleError);
  for (int s = 0; s < 4; ++s) {
    auto gen = schedule.generator(s);
    EXPECT_FALSE(gen.finite());
    const auto acts = take(gen, 3000);
    ASSERT_EQ(acts.size(), 3000u);
    const int w = warmup(sp, s);
    for (int i = 0; i < w; ++i) EXPECT_EQ(acts[i].op, Op::F);
    // Then F, B, STEP forever, minibatches in order.
    for (std::size_t k = w; k + 2 < acts.size(); k += 3) {
      const std::int64_t b = static_cast<std::int64_t>((k - w) / 3);
      EXPECT_EQ(acts[k].op, Op::F);
      EXPECT_EQ(acts[k].minibatch, b + w);
      EXPECT_EQ(acts[k + 1].op, Op::B);
      EXPECT_EQ(acts[k + 1].minibatch, b);
      EXPECT_EQ(acts[k + 2].op, Op::STEP);
      EXPECT_EQ(acts[k + 2].minibatch, b);
    }
  }
  EXPECT_EQ(schedule.materialize(10).devices[0].size(), 10u);
}

TEST(ScheduleGenerators, RoundRobinReplicasSyncBeforeStep) {
  auto sp = params(ScheduleKind::pipedream, 3, 1);
  sp.replicas = {2, 1, 1};
  sp.minibatches = 9;
  const auto list = Schedule(sp).materialize();
  ASSERT_EQ(list.devices.size(), 4u);
  for (int d = 0; d < 4; ++d) {
    const int stage = sp.stage_of(d);
    const int r = sp.replicas_of(stage);
    std::int64_t count = 0;
    for (std::size_t k = 0; k < list.devices[d].size(); ++k) {
      const Action& a = list.devices[d][k];
      EXPECT_EQ(a.replica, sp.replica_of(d));
      if (a.op == Op::F) {
        EXPECT_EQ(a.minibatch % r, sp.replica_of(d));  // b mod r_s
        ++count;
      }
      if (a.op == Op::STEP) {
        ASSERT_GT(k, 0u);
        EXPECT_EQ(list.devices[d][k - 1].op, r > 1 ? Op::SYNC : Op::B);
      }
    }
    EXPECT_EQ(count, d == 0 ? 5 : d == 1 ? 4 : 9);
  }
}

TEST(ScheduleGenerators, EveryReplicaJoinsEverySyncRound) {
  // 9 minibatches on 2 replicas: replica 1 has none in round 4, yet joins its SYNC and STEP.
  auto sp = params(ScheduleKind::pipedream, 3, 1);
  sp.replicas = {2, 1, 1};
  sp.minibatches = 9;
  for (std::int64_t n : {1, 2, 9}) {
    sp.minibatches = n;
    const auto list = Schedule(sp).materialize();
    for (int d : {0, 1}) {
      std::vector<std::int64_t> syncs, steps;
      for (const Action& a : list.devices[d]) {
        if (a.op == Op::SYNC) syncs.push_back(a.minibatch);
        if (a.op == Op::STEP) steps.push_back(a.minibatch);
      }
      std::vector<std::int64_t> rounds((n + 1) / 2);
      for (std::size_t k = 0; k < rounds.size(); ++k) rounds[k] = static_cast<std::int64_t>(k);
      EXPECT_EQ(syncs, rounds) << "d" << d << " n=" << n;
      EXPECT_EQ(steps, rounds) << "d" << d << " n=" << n;
    }
  }
  sp.minibatches = 9;
  const ActionList nine = Schedule(sp).materialize();
  const auto& d1 = nine.devices[1];
  ASSERT_GE(d1.size(), 2u);
  EXPECT_EQ(format_action(sp, d1[d1.size() - 2]), "SYNC");
  EXPECT_EQ(d1[d1.size() - 2].minibatch, 4);
  EXPECT_EQ(d1.back(), (Action{Op::STEP, 4, {}, 0, 1}));
}

TEST(ScheduleGenerators, ActionFlags) {
  auto zb = params(ScheduleKind::zb_h1, 3, 4);
  for (const auto& order : Schedule(zb).materialize().devices) {
    for (const Action& a : order) {
      EXPECT_EQ(a.with_weight, a.op != Op::B) << to_string(a);  // every B leaves W its work
      EXPECT_FALSE(a.recompute);
    }
  }
  auto gp = params(ScheduleKind::gpipe, 3, 4);
  gp.rematerialize = true;
  gp.replicas = {1, 2, 1};
  for (const auto& order : Schedule(gp).materialize().devices) {
    for (const Action& a : order) {
      EXPECT_EQ(a.recompute, a.op == Op::F || a.op == Op::B) << to_string(a);
      EXPECT_TRUE(a.with_weight);
    }
  }
  for (auto kind : {ScheduleKind::naive, ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                    ScheduleKind::interleaved, ScheduleKind::umpipe, ScheduleKind::pipedream,
                    ScheduleKind::pipedream_vsync, ScheduleKind::pipedream_2bw}) {
    auto sp = params(
        kind, 2, kind == ScheduleKind::pipedream || kind == ScheduleKind::pipedream_vsync ? 1 : 4);
    for (const auto& order : Schedule(sp).materialize().devices) {
      for (const Action& a : order) {
        EXPECT_TRUE(a.with_weight) << to_string(kind) << " " << to_string(a);
        EXPECT_FALSE(a.recompute) << to_string(kind) << " " << to_string(a);
      }
    }
  }
}

TEST(ScheduleGenerators, UmpipeUsesEachStagesCompositions) {
  auto sp = params(ScheduleKind::umpipe, 2, 1);
  sp.forward_slices = {{1, 3}, {2, 2}};
  sp.backward_slices = {{3, 1}, {}};
  sp.slices = 4;
  const auto list = Schedule(sp).materialize();
  std::vector<Slice> f0, b0, b1;
  for (const auto& a : list.devices[0]) {
    if (a.op == Op::F) f0.push_back(a.slice);
    if (a.op == Op::B) b0.push_back(a.slice);
  }
  for (const auto& a : list.devices[1]) {
    if (a.op == Op::B) b1.push_back(a.slice);
  }
  EXPECT_EQ(f0, (std::vector<Slice>{{0, 1}, {1, 4}}));
  EXPECT_EQ(b0, (std::vector<Slice>{{0, 3}, {3, 4}}));
  EXPECT_EQ(b1, (std::vector<Slice>{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));  // equal by default
}

TEST(ScheduleGenerators, BadParametersAreNamed) {
  const auto expect_error = [](ScheduleParams sp, const char* needle) {
    try {
      Schedule{sp};
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const ScheduleError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(params(ScheduleKind::gpipe, 0, 4), "stages");
  expect_error(params(ScheduleKind::gpipe, 2, 0), "slices");
  auto rep = params(ScheduleKind::gpipe, 2, 4);
  rep.replicas = {1};
  expect_error(rep, "replicas");
  auto zb = params(ScheduleKind::zb_h1, 2, 4);
  zb.replicas = {2, 1};
  expect_error(zb, "replicated");
  expect_error(params(ScheduleKind::pipedream_2bw, 4, 2), "2BW");
  auto um = params(ScheduleKind::umpipe, 2, 2);
  um.forward_slices = {{1, 1}, {1, 2}};
  expect_error(um, "forward_slices[1] sums to 3");
  auto small = params(ScheduleKind::gpipe, 2, 4);
  small.minibatch_size = 3;
  expect_error(small, "empty");
  auto flush = params(ScheduleKind::one_f_one_b, 2, 2);
  flush.minibatches = 0;
  expect_error(flush, "minibatches");
}

}  // namespace
}  // namespace tandem::schedules
