#include "planner/stage_model.hpp"

#include <string>

#include "planner/cut_bytes.hpp"
#include "planner/layer_op_times.hpp"

namespace tandem::planner {

StageModel stage_model(const Profile& profile, int begin, int end) {
  StageModel m;
  const double samples = profile.minibatch;
  for (int l = begin; l < end; ++l) {
    const LayerProfile& layer = profile.layers[l];
    const LayerOpTimes t = layer_op_times(layer);
    m.f_fixed += t.forward.fixed;
    m.f_sample += t.forward.scaled / samples;
    m.b_fixed += t.backward_input.fixed;
    m.b_sample += t.backward_input.scaled / samples;
    m.w_fixed += t.backward_weight.fixed;
    m.w_sample += t.backward_weight.scaled / samples;
    m.weight_bytes += layer.parameter_bytes;
    m.step += layer.step_ms;
    m.activation_per_sample += layer.memory_bytes / samples;
  }
  // A graph's stage sends on every tensor its cut carries, skips from earlier stages included.
  m.output_per_sample = cut_bytes(profile)[end - 1] / samples;
  return m;
}

schedules::Placement worker_placement(const Cluster& cluster, int worker) {
  schedules::Placement place;
  const int local = worker % cluster.levels.front().units;
  if (cluster.levels.size() > 1) {
    place.host = "host" + std::to_string(worker / cluster.levels.front().units);
  }
  place.device = cluster.device == "cuda" ? "cuda:" + std::to_string(local) : "cpu";
  return place;
}

double bandwidth_between(const Cluster& cluster, int a, int b) {
  long long unit = 1;
  for (const TopologyLevel& level : cluster.levels) {
    unit *= level.units;
    if (a / unit == b / unit) return level.bytes_per_second / 1000.0;
  }
  return cluster.levels.back().bytes_per_second / 1000.0;
}

}  // namespace tandem::planner
