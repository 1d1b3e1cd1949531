#include "train/config_flop_profile.hpp"

#include <string>
#include <vector>

#include "train/profile_edges.hpp"

namespace tandem::train {

planner::Profile flop_profile(const models::Model& model, int64_t minibatch) {
  planner::Profile profile;
  profile.device =
      "nominal " + std::to_string(static_cast<int>(kNominalFlopsPerSecond / 1e9)) + " GFLOP/s";
  profile.minibatch = static_cast<int>(minibatch);
  const std::vector<Shape> inputs = model.input_shapes(1);
  // What crosses the cut after each layer (a graph's skip edges cross several).
  const std::vector<double> cuts = model.cut_elements(1);
  const double ms_per_flop = 1e3 / kNominalFlopsPerSecond;
  const auto samples = static_cast<double>(minibatch);
  for (int l = 0; l < model.num_layers(); ++l) {
    const models::LayerCost c = model.layer(l).cost(inputs[static_cast<size_t>(l)]);
    planner::LayerProfile layer;
    layer.name = std::to_string(l);
    layer.forward_ms = c.forward_flops * ms_per_flop * samples;
    layer.backward_weight_ms = c.backward_weight_flops * ms_per_flop * samples;
    layer.backward_ms = c.backward_input_flops * ms_per_flop * samples + layer.backward_weight_ms;
    for (const auto& p : model.layer(l).param_specs()) {
      double n = 1;
      for (const auto d : p.shape) n *= static_cast<double>(d);
      layer.parameter_bytes += 4 * n;
    }
    layer.activation_bytes = 4 * cuts[static_cast<size_t>(l)] * samples;
    layer.memory_bytes = layer.activation_bytes;
    profile.layers.push_back(layer);
  }
  // A graph's edges: the planner counts its cuts from them (what `cuts` holds).
  add_profile_edges(model, minibatch, profile);
  return profile;
}

}  // namespace tandem::train
