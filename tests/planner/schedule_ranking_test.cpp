#include "planner/schedule_ranking.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/cut_simulation.hpp"
#include "planner/plan_output.hpp"
#include "schedules/schedule_kind.hpp"

namespace tandem::planner {
namespace {

using schedules::ScheduleKind;

// Eight alike layers whose kept activations dominate their weights, so the schedules' memory
// differs clearly.
Profile alike_layers(int count = 8) {
  Profile p;
  p.minibatch = 8;
  for (int l = 0; l < count; ++l) {
    LayerProfile layer;
    layer.name = std::to_string(l);
    layer.forward_ms = 1;
    layer.backward_ms = 2;
    layer.backward_weight_ms = 1;
    layer.activation_bytes = 1e3;
    layer.parameter_bytes = 1e3;
    layer.memory_bytes = 1e6;
    p.layers.push_back(layer);
  }
  return p;
}

Cluster workers(int n, double memory = std::numeric_limits<double>::infinity()) {
  Cluster c;
  c.levels.push_back({"worker", n, 1e9});
  c.memory_per_worker_bytes = memory;
  return c;
}

std::vector<schedules::StagePlan> cut(std::vector<std::pair<int, int>> ranges,
                                      std::vector<int> replicas = {}) {
  std::vector<schedules::StagePlan> out;
  for (std::size_t s = 0; s < ranges.size(); ++s) {
    schedules::StagePlan sp;
    sp.layers = {ranges[s].first, ranges[s].second};
    sp.replicas.assign(replicas.empty() ? 1 : static_cast<std::size_t>(replicas[s]), {});
    out.push_back(sp);
  }
  return out;
}

const RankedSchedule& entry(const ScheduleRanking& r, ScheduleKind kind, bool remat = false) {
  for (const RankedSchedule& e : r.entries) {
    if (e.kind == kind && e.rematerialize == remat) return e;
  }
  throw std::runtime_error(std::string(schedules::to_string(kind)));
}

RankingOptions quick(bool allow_async = false) {
  RankingOptions o;
  o.allow_async = allow_async;
  o.ga.population = 8;
  o.ga.generations = 4;
  return o;
}

TEST(ScheduleRanking, EveryCandidateOnceRankedByPredictedTime) {
  const Profile profile = alike_layers();
  const Cluster cluster = workers(4);
  const ScheduleRanking r = rank_planned(profile, cluster, quick(true));
  ASSERT_EQ(r.entries.size(), ranking_candidates().size());
  ASSERT_NE(r.pick(), nullptr);
  double previous = 0;
  bool dropped_seen = false;
  for (const RankedSchedule& e : r.entries) {
    if (!e.dropped.empty()) {
      dropped_seen = true;
      continue;
    }
    EXPECT_FALSE(dropped_seen) << e.name() << " ranked after a dropped entry";
    EXPECT_GE(e.step_ms, previous) << e.name();
    previous = e.step_ms;
    // The figures are the simulator's on the entry's own plan.
    EXPECT_DOUBLE_EQ(simulate_cut(profile, cluster, e.planned.plan).step_ms, e.step_ms);
  }
  // Zero-bubble schedules beat GPipe on alike stages with a W to fill the bubble.
  EXPECT_LT(entry(r, ScheduleKind::zb_h1).step_ms, entry(r, ScheduleKind::gpipe).step_ms);
  EXPECT_EQ(r.pick()->step_ms, r.entries.front().step_ms);
}

TEST(ScheduleRanking, ChunkedSchedulesPlannedOnAnEvenCut) {
  const ScheduleRanking r = rank_planned(alike_layers(), workers(4), quick());
  for (const ScheduleKind kind : {ScheduleKind::interleaved, ScheduleKind::zb_v}) {
    const RankedSchedule& e = entry(r, kind);
    ASSERT_TRUE(e.dropped.empty()) << e.dropped;
    EXPECT_EQ(e.stages, 4);
    EXPECT_EQ(e.planned.plan.schedule.chunks, 2);
  }
}

TEST(ScheduleRanking, OverTheMemoryLimitIsDroppedWithItsReason) {
  const Profile profile = alike_layers();
  const auto stages = cut({{0, 2}, {2, 4}, {4, 6}, {6, 8}});
  const ScheduleRanking free = rank_on_cut(profile, workers(4), stages, quick());
  const double gpipe = entry(free, ScheduleKind::gpipe).peak_memory_bytes;
  const double one_f_one_b = entry(free, ScheduleKind::one_f_one_b).peak_memory_bytes;
  ASSERT_GT(gpipe, one_f_one_b);
  const ScheduleRanking bounded =
      rank_on_cut(profile, workers(4, (gpipe + one_f_one_b) / 2), stages, quick());
  EXPECT_NE(entry(bounded, ScheduleKind::gpipe).dropped.find("peak memory"), std::string::npos)
      << entry(bounded, ScheduleKind::gpipe).dropped;
  EXPECT_TRUE(entry(bounded, ScheduleKind::one_f_one_b).dropped.empty());
  ASSERT_NE(bounded.pick(), nullptr);
  EXPECT_LE(bounded.pick()->peak_memory_bytes, (gpipe + one_f_one_b) / 2);
}

TEST(ScheduleRanking, AsynchronousOnlyWhenAllowed) {
  const auto stages = cut({{0, 4}, {4, 8}});
  for (const bool allow : {false, true}) {
    const ScheduleRanking r = rank_on_cut(alike_layers(), workers(2), stages, quick(allow));
    for (const ScheduleKind kind :
         {ScheduleKind::pipedream, ScheduleKind::pipedream_vsync, ScheduleKind::pipedream_2bw}) {
      const RankedSchedule& e = entry(r, kind);
      if (allow) {
        EXPECT_TRUE(e.dropped.empty()) << e.name() << ": " << e.dropped;
      } else {
        EXPECT_NE(e.dropped.find("allow_async"), std::string::npos) << e.dropped;
      }
    }
    if (!allow) {
      EXPECT_FALSE(schedules::is_asynchronous(r.pick()->kind));
    }
  }
}

TEST(ScheduleRanking, FixedCutRanksOnlyWhatRunsIt) {
  // Three layers: two stages cannot hold 2 chunks each. A replicated stage: only gpipe, 1f1b
  // and pipedream replicate.
  const ScheduleRanking r =
      rank_on_cut(alike_layers(3), workers(3), cut({{0, 1}, {1, 3}}, {2, 1}), quick(true));
  std::vector<std::string> ranked;
  for (const RankedSchedule& e : r.entries) {
    if (e.dropped.empty()) {
      ranked.push_back(e.name());
      EXPECT_EQ(e.stages, 2);
      EXPECT_EQ(e.devices, 3);
      EXPECT_EQ(e.planned.plan.stages[1].layers.begin, 1);
    }
  }
  std::sort(ranked.begin(), ranked.end());
  EXPECT_EQ(ranked, (std::vector<std::string>{"1f1b", "gpipe", "gpipe+remat", "pipedream"}));
  EXPECT_NE(entry(r, ScheduleKind::zb_h1).dropped.find("replicated"), std::string::npos)
      << entry(r, ScheduleKind::zb_h1).dropped;
  EXPECT_NE(entry(r, ScheduleKind::zb_v).dropped.find("cannot fill"), std::string::npos)
      << entry(r, ScheduleKind::zb_v).dropped;
}

TEST(ScheduleRanking, TableShowsColumnsThePickAndReasons) {
  const ScheduleRanking r = rank_on_cut(alike_layers(), workers(2), cut({{0, 4}, {4, 8}}), quick());
  const std::string table = format_ranking(r);
  for (const char* column :
       {"schedule", "stages x replicas", "slices", "step ms", "bubble", "memory"}) {
    EXPECT_NE(table.find(column), std::string::npos) << column << "\n" << table;
  }
  EXPECT_NE(table.find(r.pick()->name()), std::string::npos);
  EXPECT_NE(table.find("<- pick"), std::string::npos) << table;
  EXPECT_NE(table.find("dropped: asynchronous"), std::string::npos) << table;
  EXPECT_NE(table.find("2 x 1"), std::string::npos) << table;
}

}  // namespace
}  // namespace tandem::planner
