#include "models/layers/sim_node.hpp"

#include <stdexcept>
#include <string>

namespace tandem::models {

SimNode::SimNode(int arity, std::int64_t out, std::int64_t params)
    : arity_(arity), out_(out), params_(params) {
  if (arity < 1 || out < 1 || params < 0) {
    throw std::invalid_argument("sim layer: needs at least one input, out >= 1 and params >= 0");
  }
}

std::string SimNode::describe() const {
  return "sim(" + std::to_string(arity_) + " in, out " + std::to_string(out_) + ", " +
         std::to_string(params_) + " params)";
}

std::vector<ParamSpec> SimNode::param_specs() const {
  if (params_ == 0) return {};
  return {ParamSpec{.name = "weight", .shape = {params_}}};
}

Shape SimNode::output_shape(const Shape& input) const {
  const Shape in[] = {input};
  return output_shape_n(in);
}

Shape SimNode::output_shape_n(std::span<const Shape> inputs) const {
  if (static_cast<int>(inputs.size()) != arity_) {
    throw std::invalid_argument(describe() + ": reads " + std::to_string(arity_) +
                                " tensors, given " + std::to_string(inputs.size()));
  }
  for (const Shape& s : inputs) {
    if (s.empty() || s[0] != inputs[0][0]) {
      throw std::invalid_argument(describe() + ": its inputs must share the batch dimension, got " +
                                  shape_str(s) + " and " + shape_str(inputs[0]));
    }
  }
  return {inputs[0][0], out_};
}

void SimNode::computes() const {
  throw std::logic_error(
      describe() + ": a sim layer runs only on sim stages (device: sim); it computes nothing");
}

ForwardResult SimNode::forward(const Context&, ParamView, const Tensor&) const {
  computes();
}
Tensor SimNode::backward_input(const Context&, ParamView, Saved&, const Tensor&) const {
  computes();
}
void SimNode::backward_weight_into(const Context&, const Saved&, const Tensor&,
                                   const GradSink&) const {
  computes();
}
ForwardResult SimNode::forward_n(const Context&, ParamView, std::span<const Tensor>) const {
  computes();
}
std::vector<Tensor> SimNode::backward_input_n(const Context&, ParamView, Saved&, const Tensor&,
                                              const std::vector<bool>&) const {
  computes();
}

}  // namespace tandem::models
