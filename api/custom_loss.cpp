#include "api/custom_loss.hpp"

#include <stdexcept>
#include <utility>

#include "api/device_kernels.hpp"
#include "api/layer_conversion.hpp"

namespace tandem::api {

CustomLoss::CustomLoss(std::shared_ptr<const tandem::Loss> loss) : loss_(std::move(loss)) {
  if (loss_ == nullptr) throw std::invalid_argument("Model::with_loss: the loss is null");
}

std::string CustomLoss::prefix(const char* op) const {
  return "loss " + loss_->describe() + " " + op + ": ";
}

template <class F>
auto CustomLoss::named(const char* op, F&& call) const -> decltype(call()) {
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

Shape CustomLoss::target_shape(const Shape& output) const {
  return named("target_shape", [&] { return loss_->target_shape(output); });
}

models::LossResult CustomLoss::compute(const models::Context& ctx, const Tensor& output,
                                       const Tensor& targets, bool need_grad,
                                       float grad_scale) const {
  check_targets(output.shape(), targets.dtype(), targets.shape(), "targets");
  const models::Kernels& k = ctx.k();
  const DeviceKernels kernels(k);
  const LayerContext pc = to_public(ctx, kernels);
  models::LossResult r;
  r.count = targets.numel();
  const Tensor value = named("value", [&] { return loss_->value(pc, output, targets); });
  if (!value.defined() || value.dtype() != DType::f32 || value.device() != k.device() ||
      value.numel() != targets.numel()) {
    throw std::logic_error(prefix("value") + "gave " +
                           (value.defined() ? value.describe() : std::string("nothing")) +
                           ", wants f32 of " + std::to_string(targets.numel()) + " values on " +
                           k.device().str() + " (one per target element, through ctx.k())");
  }
  if (k.device().is_cpu()) {
    const float* v = value.data<float>();
    double sum = 0;
    for (std::int64_t i = 0; i < value.numel(); ++i) sum += v[i];
    r.loss_sum = sum;
  } else {
    r.device_sums = k.empty({4});  // a CrossEntropySums: 16 bytes
    k.sum_losses(static_cast<const float*>(value.raw_data()), value.numel(),
                 static_cast<models::CrossEntropySums*>(r.device_sums.raw_data()));
  }
  if (!need_grad) return r;
  const Tensor g = named("gradient", [&] { return loss_->gradient(pc, output, targets); });
  if (!g.defined() || g.dtype() != DType::f32 || g.device() != k.device() ||
      g.shape() != output.shape()) {
    throw std::logic_error(prefix("gradient") + "gave " +
                           (g.defined() ? g.describe() : std::string("nothing")) + ", wants f32" +
                           shape_str(output.shape()) + " on " + k.device().str() +
                           " (the output's shape, through ctx.k())");
  }
  // A copy: the application may hand back a tensor it keeps, which the scale must not touch.
  r.dlogits = k.empty(output.shape());
  k.copy(static_cast<const float*>(g.raw_data()), static_cast<float*>(r.dlogits.raw_data()),
         g.numel());
  k.scale(static_cast<float*>(r.dlogits.raw_data()), g.numel(), grad_scale);
  return r;
}

}  // namespace tandem::api
