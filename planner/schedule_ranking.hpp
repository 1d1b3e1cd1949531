#pragma once
// `schedule: auto`: every schedule the model and cluster allow, each planned (with the config's
// own cut, or with its partitioner), simulated on the profile with the cluster's links, and
// ranked by predicted step time; those that cannot run, do not fit the memory per worker or
// change the optimization unasked are kept with the reason they were dropped.
#include <string>
#include <vector>

#include "planner/cluster.hpp"
#include "planner/pipeline_planner.hpp"
#include "planner/profile.hpp"
#include "planner/umpipe_ga.hpp"
#include "schedules/plan.hpp"
#include "schedules/schedule_kind.hpp"

namespace tandem::planner {

struct RankingOptions {
  // Asynchronous schedules (pipedream, pipedream-vsync, 2bw) train differently from the
  // synchronous ones: ranked only when the user allows it, else dropped saying so.
  bool allow_async = false;
  int minibatch = 0;   // samples; 0: the profile's
  int slices = 0;      // 0: each schedule's fastest count in 1..minibatch
  UmpipeGaOptions ga;  // umpipe under the planner's partition
};

struct RankedSchedule {
  schedules::ScheduleKind kind = schedules::ScheduleKind::gpipe;
  bool rematerialize = false;  // gpipe only
  int stages = 0;
  int devices = 0;  // stages x replicas, counted
  double step_ms = 0;
  double bubble = 0;
  double peak_memory_bytes = 0;  // the fullest device's
  std::string dropped;           // empty: ranked
  PlannedPipeline planned;       // the plan and its figures, when not dropped

  // "gpipe+remat", "1f1b", ...
  std::string name() const;
};

struct ScheduleRanking {
  // The ranked entries by predicted step time (ties: synchronous first, then less memory),
  // then the dropped ones in candidate order.
  std::vector<RankedSchedule> entries;
  // What the predictions rest on that the reader should know (`--dry-run` prints them).
  std::vector<std::string> notes;

  // The fastest ranked entry; nullptr when every candidate was dropped.
  const RankedSchedule* pick() const;
};

// The candidates, in this order: gpipe, gpipe with re-materialization, 1f1b, interleaved (2
// chunks), zb-h1, zb-v, zb-2p, pipedream, pipedream-vsync, 2bw, umpipe. naive is no pipeline.
std::vector<std::pair<schedules::ScheduleKind, bool>> ranking_candidates();

// `partition: auto`: each candidate with its partitioner (plan_pipeline: the PipeDream DP, the
// min-max cut with equal slices, the UMPIPE GA); gpipe with re-materialization and 2bw on the
// 1f1b cut; the chunked schedules (interleaved, zb-v) on an even cut of the model into
// workers x 2 virtual stages, as the runtime splits chunks.
ScheduleRanking rank_planned(const Profile& profile, const Cluster& cluster,
                             const RankingOptions& options);

// The config's own stages (`cut`: layer ranges and replicas; its schedule is ignored): every
// candidate that can run that cut. Replica r of stage s is worker device_of(s, r) of `cluster`.
// umpipe is ranked with equal slices here (the GA plans with its own cut).
ScheduleRanking rank_on_cut(const Profile& profile, const Cluster& cluster,
                            const std::vector<schedules::StagePlan>& cut,
                            const RankingOptions& options);

}  // namespace tandem::planner
