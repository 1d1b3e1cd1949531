#include "planner/pipeline_planner.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "planner/cut_bytes.hpp"
#include "planner/detail/pipedream_cut_rule.hpp"
#include "planner/gpipe_partitioner.hpp"
#include "planner/pipedream_dp.hpp"
#include "planner/stage_model.hpp"
#include "planner/umpipe_baselines.hpp"
#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/simulator.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::planner {
namespace {

using schedules::ScheduleKind;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("plan: " + what);
}

std::string bytes_text(double bytes) {
  std::ostringstream os;
  os.precision(3);
  os << bytes / 1073741824.0 << " GiB";
  return os.str();
}

// The simulator's steady-state time per minibatch of a PipeDream plan: the makespan's growth
// from n to 2n minibatches over n, which leaves out the fill and the drain. The simulator has
// one bandwidth and one SYNC duration: each cut's own bandwidth is folded into its message
// size, and SYNC takes the longest all-reduce of a replicated stage.
double simulate_asynchronous(const Profile& profile, const Cluster& cluster,
                             const PipeDreamPlan& dp, const schedules::ScheduleParams& plan,
                             double sync_factor) {
  schedules::SimulationCosts costs;
  costs.bandwidth = 1.0;
  for (std::size_t s = 0; s < dp.stages.size(); ++s) {
    const PipeDreamStage& stage = dp.stages[s];
    const StageModel m = stage_model(profile, stage.begin, stage.end);
    schedules::StageCosts sc;
    sc.forward = schedules::Cost::affine(m.f_fixed, m.f_sample);
    sc.backward = schedules::Cost::affine(m.b_fixed, m.b_sample);
    sc.weight = schedules::Cost::affine(m.w_fixed, m.w_sample);
    sc.weight_bytes = m.weight_bytes;
    sc.activation_bytes = m.activation_per_sample;
    if (s + 1 < dp.stages.size()) {
      sc.output_bytes = m.output_per_sample / bandwidth_between(cluster, stage.workers.front(),
                                                                dp.stages[s + 1].workers.front());
    }
    costs.stages.push_back(sc);
    const int r = stage.replicas();
    if (r > 1) {
      const double bandwidth =
          bandwidth_between(cluster, stage.workers.front(), stage.workers.back());
      costs.sync = std::max(costs.sync, sync_factor * (r - 1) * m.weight_bytes / (r * bandwidth));
    }
  }
  int workers = 0;
  for (const PipeDreamStage& stage : dp.stages) workers += stage.replicas();
  const int n = 2 * (workers + static_cast<int>(dp.stages.size()));
  const auto makespan = [&](int minibatches) {
    schedules::ScheduleParams params = plan;
    params.minibatches = minibatches;
    return schedules::simulate(schedules::Schedule(params).materialize(), costs, false).makespan;
  };
  return (makespan(2 * n) - makespan(n)) / n;
}

PlannedPipeline plan_with_dp(const Profile& profile, const Cluster& cluster,
                             const PlanRequest& request, int minibatch) {
  // The profile's times are for its own minibatch; scale to the one asked for.
  const double scale = static_cast<double>(minibatch) / profile.minibatch;
  // A layer's activation is what the cut after it carries: a graph's skips included, counted as
  // PipeDream's optimizer counts them under its cost model (detail/pipedream_cut_rule.hpp).
  const std::vector<double> cuts = request.cost_model == CostModel::pipedream
                                       ? detail::pipedream_cut_bytes(profile)
                                       : cut_bytes(profile);
  std::vector<PipeDreamLayer> layers;
  for (std::size_t i = 0; i < profile.layers.size(); ++i) {
    const LayerProfile& l = profile.layers[i];
    layers.push_back({(l.forward_ms + l.backward_ms) * scale, l.parameter_bytes, cuts[i] * scale,
                      l.memory_bytes * scale});
  }
  std::vector<PipeDreamLevel> levels;
  for (const TopologyLevel& level : cluster.levels) {
    levels.push_back({level.units, level.bytes_per_second / 1000.0});
  }
  PipeDreamOptions options;
  options.cost_model = request.cost_model;
  options.sync_factor = cluster.sync_factor;
  if (request.cost_model == CostModel::pipedream && !cluster.sync_factor_given) {
    options.sync_factor = 4;  // PipeDream's constant
  }
  options.memory_per_worker = cluster.memory_per_worker_bytes;
  const bool vsync = request.schedule == ScheduleKind::pipedream_vsync;
  if (vsync) {
    // The schedules replicate no stage under vertical sync, and it keeps p versions per stage.
    options.replicate = false;
    options.versions = WeightVersions::vertical_sync;
  }
  PipeDreamPlan dp;
  try {
    dp = plan_pipedream(layers, levels, options);
  } catch (const std::runtime_error& e) {
    fail(std::string(e.what()) + " (" + bytes_text(cluster.memory_per_worker_bytes) +
         " per worker)");
  }

  PlannedPipeline out;
  out.method = "PipeDream DP over " + std::to_string(cluster.levels.size()) + " level(s)" +
               (vsync ? ", no replication, p versions per stage" : "") +
               (request.cost_model == CostModel::pipedream ? ", PipeDream's cost model" : "");
  out.time_per_minibatch_ms = dp.time_per_minibatch;
  out.workers = cluster.workers();
  out.noam = dp.noam;
  std::vector<schedules::StagePlan> stages;
  double busy = 0;
  for (const PipeDreamStage& stage : dp.stages) {
    schedules::StagePlan sp;
    sp.layers = {stage.begin, stage.end};
    sp.replicas.clear();
    for (const int w : stage.workers) sp.replicas.push_back(worker_placement(cluster, w));
    stages.push_back(sp);
    out.stages.push_back(
        {stage.compute_ms, stage.memory_bytes, stage.in_flight, stage.versions, stage.workers});
    busy += stage.compute_ms;  // each replica works compute / r per minibatch, r replicas
  }
  out.bubble =
      dp.time_per_minibatch > 0 ? 1.0 - busy / (dp.workers_used() * dp.time_per_minibatch) : 0.0;
  schedules::ScheduleParams params;
  params.kind = request.schedule;
  params.slices = 1;
  params.minibatch_size = minibatch;
  params.minibatches = 0;  // asynchronous: unbounded
  out.plan = schedules::Plan::make(std::move(stages), params);
  out.simulated_ms =
      simulate_asynchronous(profile, cluster, dp, out.plan.schedule, options.sync_factor);
  return out;
}

PlannedPipeline plan_flush(const Profile& profile, const Cluster& cluster,
                           const PlanRequest& request, int minibatch) {
  const int layers = static_cast<int>(profile.layers.size());
  const int workers = cluster.workers();
  const int stages = request.stages > 0 ? request.stages : workers;
  if (request.stages > workers) {
    fail("asked for " + std::to_string(stages) + " stages but the cluster has " +
         std::to_string(workers) + " workers");
  }
  if (stages > layers) {
    fail("cannot cut " + std::to_string(layers) + " layers into " + std::to_string(stages) +
         " stages" +
         (request.stages > 0 ? "" : " (one per worker; pass --stages to use fewer workers)"));
  }
  // Balance forward + backward; a stage must hold its weights and a whole minibatch of
  // activations (GPipe's peak, an upper bound for the others).
  std::vector<double> prefix_time(layers + 1, 0), prefix_memory(layers + 1, 0);
  const double scale = static_cast<double>(minibatch) / profile.minibatch;
  for (int l = 0; l < layers; ++l) {
    const LayerProfile& layer = profile.layers[l];
    prefix_time[l + 1] = prefix_time[l] + (layer.forward_ms + layer.backward_ms) * scale;
    prefix_memory[l + 1] = prefix_memory[l] + layer.parameter_bytes + layer.memory_bytes * scale;
  }
  const double bound = cluster.memory_per_worker_bytes;
  const ContiguousPartition partition = partition_min_max(layers, stages, [&](int begin, int end) {
    if (prefix_memory[end] - prefix_memory[begin] > bound) {
      return std::numeric_limits<double>::infinity();
    }
    return prefix_time[end] - prefix_time[begin];
  });
  if (!std::isfinite(partition.bottleneck)) {
    fail("no cut of " + std::to_string(layers) + " layers into " + std::to_string(stages) +
         " stages fits the memory bound of " + bytes_text(bound) + " per worker");
  }

  // Costs per slice size; stage s runs on worker s. The simulator has one bandwidth, so each
  // boundary's own bandwidth is folded into its per-sample message size (bandwidth 1).
  schedules::SimulationCosts costs;
  costs.bandwidth = 1.0;
  UmpipeProblem problem;
  problem.minibatch = minibatch;
  int begin = 0;
  for (int s = 0; s < stages; ++s) {
    const int end = partition.ends[s];
    const StageModel m = stage_model(profile, begin, end);
    schedules::StageCosts sc;
    sc.forward = schedules::Cost::affine(m.f_fixed, m.f_sample);
    sc.backward = schedules::Cost::affine(m.b_fixed, m.b_sample);
    sc.weight = schedules::Cost::affine(m.w_fixed, m.w_sample);
    sc.weight_bytes = m.weight_bytes;
    sc.activation_bytes = m.activation_per_sample;
    const double ms_per_sample =
        s + 1 < stages ? m.output_per_sample / bandwidth_between(cluster, s, s + 1) : 0.0;
    sc.output_bytes = ms_per_sample;
    costs.stages.push_back(sc);
    problem.stages.push_back(
        {schedules::Cost::affine(m.f_fixed, m.f_sample),
         schedules::Cost::affine(m.b_fixed + m.w_fixed, m.b_sample + m.w_sample)});
    if (s + 1 < stages) problem.links.push_back(schedules::Cost::affine(0, ms_per_sample));
    begin = end;
  }

  schedules::ScheduleParams params;
  params.kind = request.schedule;
  params.stages = stages;
  params.minibatch_size = minibatch;
  params.minibatches = 1;
  const auto simulate = [&](const schedules::ScheduleParams& p) {
    return schedules::simulate(schedules::Schedule(p).materialize(), costs, false);
  };

  PlannedPipeline out;
  out.workers = workers;
  if (request.slices > minibatch) {
    fail("asked for " + std::to_string(request.slices) + " slices of a minibatch of " +
         std::to_string(minibatch) + " samples");
  }
  if (request.schedule == ScheduleKind::umpipe) {
    const UmpipeGaResult ga = run_umpipe_ga(problem, request.ga);
    for (const auto& row : ga.slices.forward)
      params.forward_slices.emplace_back(row.begin(), row.end());
    for (const auto& row : ga.slices.backward) {
      params.backward_slices.emplace_back(row.begin(), row.end());
    }
    params.slices = static_cast<int>(ga.slices.forward.front().size());
    out.method = "min-max partition, UMPIPE GA (" + std::to_string(request.ga.population) + " x " +
                 std::to_string(request.ga.generations) + ", seed " +
                 std::to_string(request.ga.seed) + ")";
    out.equal_slices_ms = best_equal_slices(problem).makespan;
  } else if (request.slices > 0) {
    params.slices = request.slices;
    out.method = "min-max partition, " + std::to_string(request.slices) + " equal slices";
  } else {
    double best = std::numeric_limits<double>::infinity();
    int best_slices = 0;
    for (int m = 1; m <= minibatch; ++m) {
      params.slices = m;
      try {
        const double makespan = simulate(params).makespan;
        if (makespan < best) {
          best = makespan;
          best_slices = m;
        }
      } catch (const schedules::ScheduleError&) {
        // A slice count this schedule does not accept.
      }
    }
    if (best_slices == 0) fail("no slice count works for this schedule");
    params.slices = best_slices;
    out.method = "min-max partition, " + std::to_string(best_slices) +
                 " equal slices (fastest of 1.." + std::to_string(minibatch) + ")";
  }
  const schedules::SimulationResult result = simulate(params);
  out.time_per_minibatch_ms = result.makespan;
  out.bubble = result.bubble;
  std::vector<schedules::StagePlan> plan_stages;
  begin = 0;
  for (int s = 0; s < stages; ++s) {
    const int end = partition.ends[s];
    schedules::StagePlan sp;
    sp.layers = {begin, end};
    sp.replicas = {worker_placement(cluster, s)};
    plan_stages.push_back(sp);
    out.stages.push_back({(prefix_time[end] - prefix_time[begin]),
                          result.memory[s],
                          result.peak_in_flight[s],
                          schedules::versions_kept(params, s),
                          {s}});
    begin = end;
  }
  out.plan = schedules::Plan::make(std::move(plan_stages), params);
  return out;
}

}  // namespace

PlannedPipeline plan_pipeline(const Profile& profile, const Cluster& cluster,
                              const PlanRequest& request) {
  if (profile.layers.empty()) fail("the profile has no layers");
  if (cluster.levels.empty()) fail("the cluster has no levels");
  const int minibatch = request.minibatch > 0 ? request.minibatch : profile.minibatch;
  PlannedPipeline out;
  switch (request.schedule) {
    case ScheduleKind::pipedream:
    case ScheduleKind::pipedream_vsync:
      out = plan_with_dp(profile, cluster, request, minibatch);
      break;
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b:
    case ScheduleKind::zb_h1:
    case ScheduleKind::zb_2p:
    case ScheduleKind::umpipe:
      out = plan_flush(profile, cluster, request, minibatch);
      break;
    default:
      fail("schedule " + std::string(schedules::to_string(request.schedule)) +
           " is not planned yet (supported: pipedream, pipedream-vsync, gpipe, 1f1b, zb-h1, "
           "zb-2p, umpipe)");
  }
  out.plan.validate(static_cast<int>(profile.layers.size()));
  return out;
}

}  // namespace tandem::planner
