#include "models/layer.hpp"

#include <stdexcept>

namespace tandem::models {

LayerCost Layer::cost(const Shape& /*input*/) const {
  return {};
}

SavedLayout Layer::saved_layout(std::size_t /*k*/) const {
  return SavedLayout::rows;
}

void Layer::backward_weight_into(const Context& /*ctx*/, const Saved& /*saved*/,
                                 const Tensor& /*dy*/, const GradSink& /*sink*/) const {}

Tensor Layer::backward_into(const Context& ctx, ParamView params, Saved& saved, const Tensor& dy,
                            bool need_dx, const GradSink& sink) const {
  // Composite layers need backward_input's intermediate gradients for their weights, so it
  // runs even when dx itself is not wanted.
  Tensor dx;
  if (need_dx || !param_specs().empty()) dx = backward_input(ctx, params, saved, dy);
  if (!param_specs().empty()) backward_weight_into(ctx, saved, dy, sink);
  return need_dx ? dx : Tensor();
}

void Layer::update_buffers(const Kernels& /*k*/, ParamView /*params*/,
                           std::span<const Tensor> /*grads*/, std::span<Tensor> /*out*/) const {}

std::vector<Tensor> Layer::backward_weight(const Context& ctx, const Saved& saved,
                                           const Tensor& dy) const {
  std::vector<Tensor> grads;
  for (const ParamSpec& spec : param_specs()) grads.push_back(ctx.k().empty(spec.shape));
  backward_weight_into(ctx, saved, dy, GradSink{grads, 1.0f, 0.0f});
  return grads;
}

BackwardResult Layer::backward(const Context& ctx, ParamView params, Saved& saved, const Tensor& dy,
                               bool need_dx) const {
  BackwardResult out;
  for (const ParamSpec& spec : param_specs()) out.grads.push_back(ctx.k().empty(spec.shape));
  out.dx = backward_into(ctx, params, saved, dy, need_dx, GradSink{out.grads, 1.0f, 0.0f});
  return out;
}

Shape Layer::output_shape_n(std::span<const Shape> inputs) const {
  if (inputs.size() != 1) {
    throw std::invalid_argument(describe() + ": reads one tensor, got " +
                                std::to_string(inputs.size()));
  }
  return output_shape(inputs[0]);
}

ForwardResult Layer::forward_n(const Context& ctx, ParamView params,
                               std::span<const Tensor> xs) const {
  if (xs.size() != 1) {
    throw std::invalid_argument(describe() + ": reads one tensor, got " +
                                std::to_string(xs.size()));
  }
  return forward(ctx, params, xs[0]);
}

std::vector<Tensor> Layer::backward_input_n(const Context& ctx, ParamView params, Saved& saved,
                                            const Tensor& dy, const std::vector<bool>& want) const {
  std::vector<Tensor> out(1);
  if (!want.empty() && want[0]) out[0] = backward_input(ctx, params, saved, dy);
  return out;
}

std::int64_t Layer::param_numel() const {
  std::int64_t n = 0;
  for (const ParamSpec& spec : param_specs()) n += shape_numel(spec.shape);
  return n;
}

}  // namespace tandem::models
