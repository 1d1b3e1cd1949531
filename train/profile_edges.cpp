#include "train/profile_edges.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tandem::train {
namespace {

double elements(const Shape& shape) {
  double n = 1;
  for (const auto d : shape) n *= static_cast<double>(d);
  return n;
}

}  // namespace

void add_profile_edges(const models::Model& model, std::int64_t minibatch,
                       planner::Profile& profile) {
  if (model.is_chain()) return;
  static_assert(models::Model::kModelInput == planner::kProfileModelInput);
  const auto samples = static_cast<double>(minibatch);
  const std::vector<Shape> outputs = model.activation_shapes(1);
  profile.input_bytes = 4 * elements(model.input_shape(1)) * samples;
  for (int l = 0; l < model.num_layers(); ++l) {
    planner::LayerProfile& layer = profile.layers[static_cast<std::size_t>(l)];
    // A layer may read one tensor twice (x + x); the profile lists each input once.
    std::vector<int> inputs = model.sources(l);
    std::sort(inputs.begin(), inputs.end());
    inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
    layer.inputs = std::move(inputs);
    layer.activation_bytes = 4 * elements(outputs[static_cast<std::size_t>(l)]) * samples;
  }
}

}  // namespace tandem::train
