#include "api/builtin_layer.hpp"

#include <utility>

#include "api/layer_conversion.hpp"

namespace tandem::api {

BuiltinLayer::BuiltinLayer(std::shared_ptr<const models::Layer> impl) : impl_(std::move(impl)) {}

std::vector<ParamSpec> BuiltinLayer::param_specs() const {
  return to_public(impl_->param_specs());
}

LayerCost BuiltinLayer::cost(const Shape& input) const {
  return to_public(impl_->cost(input));
}

ForwardResult BuiltinLayer::forward(const LayerContext& ctx, ParamView params,
                                    const Tensor& x) const {
  models::ForwardResult r = impl_->forward(to_models(ctx), params, x);
  return {std::move(r.y), std::move(r.saved)};
}

Tensor BuiltinLayer::backward_input(const LayerContext& ctx, ParamView params, Saved& saved,
                                    const Tensor& dy) const {
  return impl_->backward_input(to_models(ctx), params, saved, dy);
}

void BuiltinLayer::backward_weight_into(const LayerContext& ctx, const Saved& saved,
                                        const Tensor& dy, const GradSink& sink) const {
  impl_->backward_weight_into(to_models(ctx), saved, dy, {sink.grads, sink.alpha, sink.beta});
}

SavedLayout BuiltinLayer::saved_layout(std::size_t k) const {
  return to_public(impl_->saved_layout(k));
}

}  // namespace tandem::api
