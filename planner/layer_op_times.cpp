#include "planner/layer_op_times.hpp"

#include <algorithm>

namespace tandem::planner {

LayerOpTimes layer_op_times(const LayerProfile& layer) {
  const double input_ms = layer.backward_ms - layer.backward_weight_ms;
  const double input_fixed = std::min(layer.backward_fixed_ms, input_ms);
  const double weight_fixed = layer.backward_fixed_ms - input_fixed;
  return {.forward = {layer.forward_fixed_ms, layer.forward_ms - layer.forward_fixed_ms},
          .backward_input = {input_fixed, input_ms - input_fixed},
          .backward_weight = {weight_fixed, layer.backward_weight_ms - weight_fixed}};
}

}  // namespace tandem::planner
