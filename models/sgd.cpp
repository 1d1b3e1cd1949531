#include "models/sgd.hpp"

#include <algorithm>
#include <stdexcept>

#include "models/detail/optimizer_util.hpp"
#include "models/kernels/cpu/threading.hpp"

namespace tandem::models {

Sgd::Sgd(const OptimizerSpec& spec)
    : Optimizer(spec.lr, "optimizer sgd"),
      momentum_(spec.momentum),
      weight_decay_(spec.weight_decay),
      nesterov_(spec.nesterov) {
  if (!(spec.lr >= 0)) throw std::invalid_argument("optimizer sgd: field 'lr' must be >= 0");
  if (!(spec.momentum >= 0))
    throw std::invalid_argument("optimizer sgd: field 'momentum' must be >= 0");
  if (!(spec.weight_decay >= 0)) {
    throw std::invalid_argument("optimizer sgd: field 'weight_decay' must be >= 0");
  }
  if (spec.nesterov && spec.momentum <= 0) {
    throw std::invalid_argument("optimizer sgd: field 'nesterov' needs momentum > 0");
  }
}

std::optional<FusedUpdate> Sgd::fused_update() const {
  if (momentum_ != 0) return std::nullopt;
  return FusedUpdate{static_cast<float>(-lr_), static_cast<float>(1.0 - lr_ * weight_decay_)};
}

void Sgd::step(ParamSet& params, const ParamSet& grads) {
  detail::check_step_args(params, grads, who_);
  const auto lr = static_cast<float>(lr_);
  const auto wd = static_cast<float>(weight_decay_);
  const auto mom = static_cast<float>(momentum_);
  for (std::int64_t i = 0; i < params.size(); ++i) {
    detail::UpdateTarget t = detail::update_target(params, i);
    const float* p = t.old.data<float>();
    float* out = t.out.data<float>();
    const float* g = grads[i].data<float>();
    const std::int64_t n = t.old.numel();
    if (mom == 0.0f) {
      cpu::parallel_for(n, cpu::kElementGrain, [&](std::int64_t k0, std::int64_t k1) {
        for (std::int64_t k = k0; k < k1; ++k) out[k] = p[k] - lr * (g[k] + wd * p[k]);
      });
      continue;
    }
    auto it = momentum_buffers_.find(params.name(i));
    const bool first = it == momentum_buffers_.end();
    if (first) {
      it = momentum_buffers_.emplace(params.name(i), Tensor::empty(t.old.shape())).first;
    }
    float* buf = it->second.data<float>();
    const bool nesterov = nesterov_;
    cpu::parallel_for(n, cpu::kElementGrain, [&](std::int64_t k0, std::int64_t k1) {
      for (std::int64_t k = k0; k < k1; ++k) {
        const float d = g[k] + wd * p[k];
        const float b = first ? d : mom * buf[k] + d;
        buf[k] = b;
        out[k] = p[k] - lr * (nesterov ? d + mom * b : b);
      }
    });
  }
  ++steps_;
}

ParamSet Sgd::state() const {
  ParamSet s;
  // Sorted names: the set's order must not depend on hash-map iteration.
  std::vector<std::string> names;
  for (const auto& [name, buf] : momentum_buffers_) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names)
    s.add("momentum." + name, momentum_buffers_.at(name).clone());
  return s;
}

void Sgd::load_state(const ParamSet& state, std::int64_t steps) {
  momentum_buffers_.clear();
  for (std::int64_t i = 0; i < state.size(); ++i) {
    const std::string& name = state.name(i);
    if (!name.starts_with("momentum.")) {
      throw std::invalid_argument("optimizer sgd: unexpected state entry '" + name + "'");
    }
    momentum_buffers_.emplace(name.substr(9), state[i].clone());
  }
  steps_ = steps;
}

}  // namespace tandem::models
