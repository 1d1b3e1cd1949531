#include "models/grad_norm.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "models/model.hpp"

namespace tandem::models {

GradNormLayout::GradNormLayout(const Model& model) {
  std::unordered_map<std::string, bool> followers;
  for (const std::string& name : follower_names(model.ties())) followers.emplace(name, true);
  for (int layer = 0; layer < model.num_layers(); ++layer) {
    for (const ParamSpec& spec : model.layer(layer).param_specs()) {
      std::string name = model.param_name(layer, spec.name);
      if (!spec.trainable || followers.contains(name)) continue;
      slot_.emplace(std::move(name), slots_++);
    }
  }
}

std::int64_t GradNormLayout::slot(std::string_view name) const {
  const auto it = slot_.find(std::string(name));
  return it == slot_.end() ? -1 : it->second;
}

void gradient_squares(const Kernels& k, const GradNormLayout& layout, const ParamSet& grads,
                      Tensor& squares) {
  if (!squares.defined() || squares.dtype() != DType::f32 || squares.numel() != layout.slots() ||
      squares.device() != k.device()) {
    throw std::invalid_argument("gradient norm: the squares tensor " +
                                (squares.defined() ? squares.describe() : std::string("(none)")) +
                                " is not f32[" + std::to_string(layout.slots()) + "] on " +
                                k.device().str());
  }
  if (!k.device().has_data()) return;
  float* out = squares.data<float>();
  k.fill(out, layout.slots(), 0.0f);
  for (std::int64_t i = 0; i < grads.size(); ++i) {
    const std::int64_t s = layout.slot(grads.name(i));
    if (s < 0) continue;
    k.sum_squares(grads[i].data<float>(), grads[i].numel(), out + s);
  }
}

double fold_norm(const float* squares, std::int64_t slots) {
  double total = 0.0;
  for (std::int64_t s = 0; s < slots; ++s) total += static_cast<double>(squares[s]);
  return std::sqrt(total);
}

float clip_coefficient(double norm, double max_norm) {
  if (!std::isfinite(norm)) return 1.0f;
  const double c = max_norm / (norm + 1e-6);
  return c < 1.0 ? static_cast<float>(c) : 1.0f;
}

void scale_gradients(const Kernels& k, const GradNormLayout& layout, ParamSet& grads,
                     float coefficient) {
  if (coefficient == 1.0f || !k.device().has_data()) return;
  for (std::int64_t i = 0; i < grads.size(); ++i) {
    if (layout.slot(grads.name(i)) < 0) continue;
    k.scale(grads[i].data<float>(), grads[i].numel(), coefficient);
  }
}

double gradient_norm(const Kernels& k, const GradNormLayout& layout, const ParamSet& grads) {
  Tensor squares = k.empty({layout.slots()}, DType::f32);
  gradient_squares(k, layout, grads, squares);
  const Tensor host = squares.device() == Device::cpu() ? squares : squares.to(Device::cpu());
  return fold_norm(host.data<float>(), layout.slots());
}

}  // namespace tandem::models
