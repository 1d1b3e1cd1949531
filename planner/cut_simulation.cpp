#include "planner/cut_simulation.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "planner/stage_model.hpp"
#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/simulator.hpp"

namespace tandem::planner {
namespace {

namespace ts = tandem::schedules;

int worker_of_virtual(const ts::ScheduleParams& params, int vstage) {
  return params.device_of(params.stage_of_virtual(vstage), 0);
}

// One entry per virtual stage. The simulator has one bandwidth, so each cut's own bandwidth is
// folded into its per-sample message size (bandwidth 1).
ts::SimulationCosts cut_costs(const Profile& profile, const Cluster& cluster,
                              const ts::Plan& plan) {
  const ts::ScheduleParams& params = plan.schedule;
  const std::vector<ts::LayerRange> vlayers =
      ts::virtual_stage_layers(plan, static_cast<int>(profile.layers.size()));
  ts::SimulationCosts costs;
  costs.bandwidth = 1.0;
  double previous_output = 0;
  for (std::size_t v = 0; v < vlayers.size(); ++v) {
    const StageModel m = stage_model(profile, vlayers[v].begin, vlayers[v].end);
    ts::StageCosts sc;
    sc.forward = ts::Cost::affine(m.f_fixed, m.f_sample);
    sc.backward = ts::Cost::affine(m.b_fixed, m.b_sample);
    sc.weight = ts::Cost::affine(m.w_fixed, m.w_sample);
    sc.weight_bytes = m.weight_bytes;
    sc.step = m.step;
    sc.activation_bytes = m.activation_per_sample;
    sc.input_bytes = previous_output;  // what re-materialization keeps
    previous_output = m.output_per_sample;
    if (v + 1 < vlayers.size()) {
      const int a = worker_of_virtual(params, static_cast<int>(v));
      const int b = worker_of_virtual(params, static_cast<int>(v) + 1);
      sc.output_bytes = a == b ? 0.0 : m.output_per_sample / bandwidth_between(cluster, a, b);
    }
    costs.stages.push_back(sc);
  }
  // SYNC takes the longest all-reduce of a replicated stage.
  for (int s = 0; s < params.stages; ++s) {
    const int r = params.replicas_of(s);
    if (r < 2) continue;
    const ts::LayerRange layers = plan.stages[static_cast<std::size_t>(s)].layers;
    const double weights = stage_model(profile, layers.begin, layers.end).weight_bytes;
    const double bandwidth =
        bandwidth_between(cluster, params.device_of(s, 0), params.device_of(s, r - 1));
    costs.sync = std::max(costs.sync, cluster.sync_factor * (r - 1) * weights / (r * bandwidth));
  }
  return costs;
}

ts::SimulationResult run(const ts::Plan& plan, const ts::SimulationCosts& costs,
                         std::int64_t minibatches) {
  ts::ScheduleParams params = plan.schedule;
  params.minibatches = minibatches;
  return ts::simulate(ts::Schedule(params).materialize(), costs, false);
}

}  // namespace

CutPrediction simulate_cut(const Profile& profile, const Cluster& cluster,
                           const schedules::Plan& plan) {
  const ts::SimulationCosts costs = cut_costs(profile, cluster, plan);
  CutPrediction out;
  ts::SimulationResult result;
  if (ts::is_asynchronous(plan.schedule.kind)) {
    const int n = 2 * (plan.schedule.total_replicas() + plan.schedule.stages);
    const double first = run(plan, costs, n).makespan;
    result = run(plan, costs, 2 * n);
    out.step_ms = (result.makespan - first) / n;
  } else {
    result = run(plan, costs, 1);
    out.step_ms = result.makespan;
  }
  out.bubble = result.bubble;
  out.memory_bytes = result.memory;
  out.peak_in_flight = result.peak_in_flight;
  return out;
}

schedules::Plan fastest_slices(const Profile& profile, const Cluster& cluster,
                               schedules::Plan plan) {
  const ts::ScheduleKind kind = plan.schedule.kind;
  if (kind == ts::ScheduleKind::pipedream || kind == ts::ScheduleKind::pipedream_vsync) {
    plan.schedule.slices = 1;
    (void)simulate_cut(profile, cluster, plan);  // refuses what cannot run
    return plan;
  }
  const auto samples = static_cast<int>(std::max<std::int64_t>(1, plan.schedule.minibatch_size));
  double best = std::numeric_limits<double>::infinity();
  int best_slices = 0;
  std::string refusal = "no slice count in 1.." + std::to_string(samples);
  for (int m = 1; m <= samples; ++m) {
    plan.schedule.slices = m;
    try {
      const double step = simulate_cut(profile, cluster, plan).step_ms;
      if (step < best) {
        best = step;
        best_slices = m;
      }
    } catch (const ts::ScheduleError& e) {
      refusal = e.what();  // a slice count this schedule does not accept
    }
  }
  if (best_slices == 0) throw ts::ScheduleError(refusal);
  plan.schedule.slices = best_slices;
  return plan;
}

}  // namespace tandem::planner
