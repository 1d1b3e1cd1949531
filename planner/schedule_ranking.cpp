#include "planner/schedule_ranking.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <utility>

#include "planner/cut_simulation.hpp"
#include "planner/stage_model.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::planner {
namespace {

namespace ts = tandem::schedules;
using ts::ScheduleKind;

constexpr int kChunks = 2;  // interleaved's default and zb-v's only count

bool chunked(ScheduleKind kind) {
  return kind == ScheduleKind::interleaved || kind == ScheduleKind::zb_v;
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g GiB", bytes / 1073741824.0);
  return text;
}

int minibatch_of(const Profile& profile, const RankingOptions& options) {
  return options.minibatch > 0 ? options.minibatch : profile.minibatch;
}

// The entry for a plan whose slices are chosen: its figures from the simulator.
RankedSchedule evaluated(const Profile& profile, const Cluster& cluster, const ts::Plan& plan,
                         std::string method) {
  const CutPrediction prediction = simulate_cut(profile, cluster, plan);
  const ts::ScheduleParams& params = plan.schedule;
  RankedSchedule e;
  e.kind = params.kind;
  e.rematerialize = params.rematerialize;
  e.stages = params.stages;
  e.devices = params.total_replicas();
  e.step_ms = prediction.step_ms;
  e.bubble = prediction.bubble;
  for (const double m : prediction.memory_bytes) {
    e.peak_memory_bytes = std::max(e.peak_memory_bytes, m);
  }
  PlannedPipeline& out = e.planned;
  out.plan = plan;
  out.method = std::move(method);
  out.time_per_minibatch_ms = prediction.step_ms;
  out.bubble = prediction.bubble;
  out.workers = cluster.workers();
  const double samples = static_cast<double>(params.samples());
  for (int s = 0; s < params.stages; ++s) {
    const ts::LayerRange layers = plan.stages[static_cast<std::size_t>(s)].layers;
    const StageModel m = stage_model(profile, layers.begin, layers.end);
    PlannedStage st;
    st.compute_ms =
        m.f_fixed + m.b_fixed + m.w_fixed + samples * (m.f_sample + m.b_sample + m.w_sample);
    const auto first = static_cast<std::size_t>(params.device_of(s, 0));
    st.memory_bytes = prediction.memory_bytes.at(first);
    st.in_flight = prediction.peak_in_flight.at(first);
    st.versions = ts::versions_kept(params, s);
    for (int r = 0; r < params.replicas_of(s); ++r) st.workers.push_back(params.device_of(s, r));
    out.stages.push_back(std::move(st));
  }
  return e;
}

// Slices as the user gave them, else the schedule's fastest count.
ts::Plan with_slices(const Profile& profile, const Cluster& cluster, ts::Plan plan,
                     const RankingOptions& options) {
  if (options.slices == 0) return fastest_slices(profile, cluster, std::move(plan));
  plan.schedule.slices = options.slices;
  return plan;
}

std::string slices_method(const ts::Plan& plan, const RankingOptions& options) {
  const std::string count = std::to_string(plan.schedule.slices) + " equal slices";
  return options.slices > 0 ? count : count + " (the fastest count)";
}

// The chunked schedules' cut: stages * 2 virtual stages of (nearly) equal layer counts, as the
// runtime splits a chunked model; one stage per worker, as many as the layers fill.
ts::Plan even_chunked_plan(const Profile& profile, const Cluster& cluster, ScheduleKind kind,
                           int minibatch) {
  const int layers = static_cast<int>(profile.layers.size());
  const int stages = std::min(cluster.workers(), layers / kChunks);
  if (stages < 1) {
    throw ts::ScheduleError(std::to_string(layers) + " layer(s) cannot fill " +
                            std::to_string(kChunks) + " chunks");
  }
  std::vector<ts::StagePlan> cut;
  for (int s = 0; s < stages; ++s) {
    ts::StagePlan sp;
    sp.layers = {s * layers / stages, (s + 1) * layers / stages};
    sp.replicas = {worker_placement(cluster, s)};
    cut.push_back(sp);
  }
  ts::ScheduleParams params;
  params.kind = kind;
  params.chunks = kChunks;
  params.minibatch_size = minibatch;
  return ts::Plan::make(std::move(cut), params);
}

RankedSchedule plan_candidate(const Profile& profile, const Cluster& cluster,
                              const RankingOptions& options, ScheduleKind kind, bool remat) {
  const int minibatch = minibatch_of(profile, options);
  if (chunked(kind)) {
    const ts::Plan plan = with_slices(
        profile, cluster, even_chunked_plan(profile, cluster, kind, minibatch), options);
    return evaluated(profile, cluster, plan,
                     "even cut into 2 chunks per worker, " + slices_method(plan, options));
  }
  // gpipe with re-materialization and 2bw run on the cut their relatives plan.
  const bool borrowed = remat || kind == ScheduleKind::pipedream_2bw;
  PlanRequest request;
  request.schedule = kind == ScheduleKind::pipedream_2bw ? ScheduleKind::one_f_one_b : kind;
  request.minibatch = minibatch;
  request.slices = options.slices;
  request.ga = options.ga;
  const PlannedPipeline planned = plan_pipeline(profile, cluster, request);
  if (!borrowed) return evaluated(profile, cluster, planned.plan, planned.method);
  ts::Plan plan = planned.plan;
  plan.schedule.kind = kind;
  plan.schedule.rematerialize = remat;
  plan = with_slices(profile, cluster, std::move(plan), options);
  return evaluated(profile, cluster, plan,
                   std::string(remat ? "gpipe's" : "1f1b's") + " min-max partition, " +
                       slices_method(plan, options));
}

RankedSchedule cut_candidate(const Profile& profile, const Cluster& cluster,
                             const std::vector<ts::StagePlan>& cut, const RankingOptions& options,
                             ScheduleKind kind, bool remat) {
  ts::ScheduleParams params;
  params.kind = kind;
  params.rematerialize = remat;
  params.chunks = chunked(kind) ? kChunks : 1;
  params.minibatch_size = minibatch_of(profile, options);
  ts::Plan plan = with_slices(profile, cluster, ts::Plan::make(cut, params), options);
  plan.validate(static_cast<int>(profile.layers.size()));
  return evaluated(profile, cluster, plan,
                   std::string("the config's stages") + (params.chunks > 1 ? " as 2 chunks" : "") +
                       ", " + slices_method(plan, options));
}

// Runs `plan` for every candidate, recording what refuses it, and ranks the rest.
template <class Plan>
ScheduleRanking rank(const Cluster& cluster, const RankingOptions& options, Plan&& plan) {
  std::vector<RankedSchedule> ranked, dropped;
  for (const auto& [kind, remat] : ranking_candidates()) {
    RankedSchedule e;
    e.kind = kind;
    e.rematerialize = remat;
    if (ts::is_asynchronous(kind) && !options.allow_async) {
      e.dropped = "asynchronous: it changes the optimization (allow_async: true ranks it)";
      dropped.push_back(std::move(e));
      continue;
    }
    try {
      e = plan(kind, remat);
    } catch (const std::exception& error) {
      e.dropped = error.what();
    }
    if (e.dropped.empty() && e.peak_memory_bytes > cluster.memory_per_worker_bytes) {
      e.dropped = "peak memory " + gib(e.peak_memory_bytes) + " per device is over the " +
                  gib(cluster.memory_per_worker_bytes) + " per worker";
    }
    (e.dropped.empty() ? ranked : dropped).push_back(std::move(e));
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    const double scale = std::max(std::abs(a.step_ms), std::abs(b.step_ms));
    if (std::abs(a.step_ms - b.step_ms) > 1e-9 * scale) return a.step_ms < b.step_ms;
    const bool a_async = ts::is_asynchronous(a.kind), b_async = ts::is_asynchronous(b.kind);
    if (a_async != b_async) return b_async;
    return a.peak_memory_bytes < b.peak_memory_bytes;
  });
  ScheduleRanking out;
  out.entries = std::move(ranked);
  for (RankedSchedule& e : dropped) out.entries.push_back(std::move(e));
  return out;
}

}  // namespace

std::string RankedSchedule::name() const {
  return std::string(ts::to_string(kind)) + (rematerialize ? "+remat" : "");
}

const RankedSchedule* ScheduleRanking::pick() const {
  if (entries.empty() || !entries.front().dropped.empty()) return nullptr;
  return &entries.front();
}

std::vector<std::pair<ScheduleKind, bool>> ranking_candidates() {
  return {{ScheduleKind::gpipe, false},           {ScheduleKind::gpipe, true},
          {ScheduleKind::one_f_one_b, false},     {ScheduleKind::interleaved, false},
          {ScheduleKind::zb_h1, false},           {ScheduleKind::zb_v, false},
          {ScheduleKind::zb_2p, false},           {ScheduleKind::pipedream, false},
          {ScheduleKind::pipedream_vsync, false}, {ScheduleKind::pipedream_2bw, false},
          {ScheduleKind::umpipe, false}};
}

ScheduleRanking rank_planned(const Profile& profile, const Cluster& cluster,
                             const RankingOptions& options) {
  return rank(cluster, options, [&](ScheduleKind kind, bool remat) {
    return plan_candidate(profile, cluster, options, kind, remat);
  });
}

ScheduleRanking rank_on_cut(const Profile& profile, const Cluster& cluster,
                            const std::vector<schedules::StagePlan>& cut,
                            const RankingOptions& options) {
  return rank(cluster, options, [&](ScheduleKind kind, bool remat) {
    return cut_candidate(profile, cluster, cut, options, kind, remat);
  });
}

}  // namespace tandem::planner
