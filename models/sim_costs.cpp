#include "models/sim_costs.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem::models {
namespace {

double entry(const std::vector<double>& table, int layer, const char* name) {
  if (layer < 0 || static_cast<std::size_t>(layer) >= table.size()) {
    throw std::out_of_range("SimCosts::" + std::string(name) + ": no duration for layer " +
                            std::to_string(layer) + " (table has " + std::to_string(table.size()) +
                            " entries)");
  }
  return table[static_cast<std::size_t>(layer)];
}

}  // namespace

SimCosts SimCosts::uniform(int num_layers, double forward, double backward_input,
                           double backward_weight, double optimizer_step) {
  const auto n = static_cast<std::size_t>(std::max(0, num_layers));
  return SimCosts{std::vector<double>(n, forward), std::vector<double>(n, backward_input),
                  std::vector<double>(n, backward_weight), optimizer_step};
}

double SimCosts::forward(int layer) const {
  return entry(forward_ms, layer, "forward_ms");
}
double SimCosts::backward_input(int layer) const {
  return entry(backward_input_ms, layer, "backward_input_ms");
}
double SimCosts::backward_weight(int layer) const {
  return entry(backward_weight_ms, layer, "backward_weight_ms");
}
double SimCosts::layer_step(int layer) const {
  return step_ms.empty() ? 0.0 : entry(step_ms, layer, "step_ms");
}

}  // namespace tandem::models
