#include "planner/detail/layer_sums.hpp"

namespace tandem::planner::detail {

LayerSums::LayerSums(std::span<const PipeDreamLayer> layers)
    : compute(layers.size() + 1, 0),
      weights(layers.size() + 1, 0),
      memory(layers.size() + 1, 0),
      footprint(layers.size() + 1, 0) {
  activation.reserve(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    compute[l + 1] = compute[l] + layers[l].compute_ms;
    weights[l + 1] = weights[l] + layers[l].parameter_bytes;
    memory[l + 1] = memory[l] + layers[l].memory_bytes;
    footprint[l + 1] = footprint[l] + layers[l].parameter_bytes + layers[l].memory_bytes;
    activation.push_back(layers[l].activation_bytes);
  }
}

}  // namespace tandem::planner::detail
