#pragma once

#include <vector>

namespace tandem::models {

// How long each op takes on the sim device, which computes nothing: an op on sim tensors only
// makes outputs of the right shapes and charges its duration to a SimClock. Plain numbers by
// layer index (apps/ fills them from a profile; models/ never reads one).
struct SimCosts {
  std::vector<double> forward_ms;          // one forward of the layer
  std::vector<double> backward_input_ms;   // charged when its input gradient is computed
  std::vector<double> backward_weight_ms;  // charged on every backward of the layer (0 for
                                           // layers without parameters, as a profile measures)
  double optimizer_step_ms = 0;            // one Optimizer::sim_step
  // Per layer, the optimizer's update of its weights (a profile's step_ms); empty: none. A stage
  // built from these costs charges optimizer_step_ms plus its layers' entries per step.
  std::vector<double> step_ms;

  // The same durations for each of `num_layers` layers.
  static SimCosts uniform(int num_layers, double forward, double backward_input,
                          double backward_weight, double optimizer_step = 0);

  // Throw std::out_of_range naming the table and the layer when it has no entry.
  double forward(int layer) const;
  double backward_input(int layer) const;
  double backward_weight(int layer) const;
  // step_ms's entry, 0 when the table is empty.
  double layer_step(int layer) const;
};

}  // namespace tandem::models
