#include "api/custom_layer.hpp"

#include <stdexcept>
#include <utility>

#include "api/device_kernels.hpp"
#include "api/layer_conversion.hpp"

namespace tandem::api {

CustomLayer::CustomLayer(std::shared_ptr<const tandem::Layer> layer, int index)
    : layer_(std::move(layer)), index_(index) {}

std::string CustomLayer::prefix(const char* op) const {
  return "layer " + std::to_string(index_) + " (" + layer_->describe() + ") " + op + ": ";
}

template <class F>
auto CustomLayer::named(const char* op, F&& call) const -> decltype(call()) {
  try {
    return call();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(prefix(op) + e.what());
  } catch (const std::logic_error& e) {
    throw std::logic_error(prefix(op) + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error(prefix(op) + e.what());
  }
}

void CustomLayer::check_output(const char* op, const char* what, const Tensor& t, Device device,
                               const Shape& shape) const {
  if (!t.defined()) throw std::logic_error(prefix(op) + what + " is undefined");
  if (t.device() != device || t.shape() != shape) {
    throw std::logic_error(prefix(op) + what + " is " + t.describe() + ", wants " +
                           shape_str(shape) + " on " + device.str() +
                           " (allocate through ctx.k())");
  }
}

std::vector<models::ParamSpec> CustomLayer::param_specs() const {
  return to_models(layer_->param_specs());
}

Shape CustomLayer::output_shape(const Shape& input) const {
  return named("output_shape", [&] { return layer_->output_shape(input); });
}

models::LayerCost CustomLayer::cost(const Shape& input) const {
  return to_models(named("cost", [&] { return layer_->cost(input); }));
}

models::ForwardResult CustomLayer::forward(const models::Context& ctx, models::ParamView params,
                                           const Tensor& x) const {
  const DeviceKernels kernels(ctx.k());
  const LayerContext pc = to_public(ctx, kernels);
  ForwardResult r = named("forward", [&] { return layer_->forward(pc, params, x); });
  check_output("forward", "y", r.y, kernels.device(), output_shape(x.shape()));
  return {std::move(r.y), std::move(r.saved)};
}

Tensor CustomLayer::backward_input(const models::Context& ctx, models::ParamView params,
                                   models::Saved& saved, const Tensor& dy) const {
  const DeviceKernels kernels(ctx.k());
  const LayerContext pc = to_public(ctx, kernels);
  Tensor dx =
      named("backward_input", [&] { return layer_->backward_input(pc, params, saved, dy); });
  if (!dx.defined() || dx.device() != kernels.device()) {
    check_output("backward_input", "dx", dx, kernels.device(), dx.shape());
  }
  return dx;
}

void CustomLayer::backward_weight_into(const models::Context& ctx, const models::Saved& saved,
                                       const Tensor& dy, const models::GradSink& sink) const {
  const DeviceKernels kernels(ctx.k());
  const LayerContext pc = to_public(ctx, kernels);
  const GradSink ps{sink.grads, sink.alpha, sink.beta};
  named("backward_weight_into", [&] { layer_->backward_weight_into(pc, saved, dy, ps); });
}

models::SavedLayout CustomLayer::saved_layout(std::size_t k) const {
  return to_models(layer_->saved_layout(k));
}

}  // namespace tandem::api
