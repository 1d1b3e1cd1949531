#include "models/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "models/detail/optimizer_util.hpp"
#include "models/kernels/cpu/threading.hpp"

namespace tandem::models {

AdamW::AdamW(const OptimizerSpec& spec)
    : Optimizer(spec.lr, "optimizer adamw"),
      beta1_(spec.beta1),
      beta2_(spec.beta2),
      eps_(spec.eps),
      weight_decay_(spec.weight_decay) {
  if (!(spec.lr >= 0)) throw std::invalid_argument("optimizer adamw: field 'lr' must be >= 0");
  if (!(spec.beta1 >= 0 && spec.beta1 < 1)) {
    throw std::invalid_argument("optimizer adamw: field 'beta1' must be in [0, 1)");
  }
  if (!(spec.beta2 >= 0 && spec.beta2 < 1)) {
    throw std::invalid_argument("optimizer adamw: field 'beta2' must be in [0, 1)");
  }
  if (!(spec.eps > 0)) throw std::invalid_argument("optimizer adamw: field 'eps' must be > 0");
  if (!(spec.weight_decay >= 0)) {
    throw std::invalid_argument("optimizer adamw: field 'weight_decay' must be >= 0");
  }
}

void AdamW::step(ParamSet& params, const ParamSet& grads) {
  detail::check_step_args(params, grads, who_);
  const double t = static_cast<double>(steps_ + 1);
  const double bc1 = 1.0 - std::pow(beta1_, t);
  const double bc2 = 1.0 - std::pow(beta2_, t);
  const auto decay = static_cast<float>(1.0 - lr_ * weight_decay_);
  const auto step_size = static_cast<float>(lr_ / bc1);
  const auto inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const auto b1 = static_cast<float>(beta1_);
  const auto b2 = static_cast<float>(beta2_);
  const auto eps = static_cast<float>(eps_);
  for (std::int64_t i = 0; i < params.size(); ++i) {
    detail::UpdateTarget target = detail::update_target(params, i);
    const std::string& name = params.name(i);
    if (!exp_avg_.contains(name)) {
      exp_avg_.emplace(name, Tensor::zeros(target.old.shape()));
      exp_avg_sq_.emplace(name, Tensor::zeros(target.old.shape()));
    }
    float* m = exp_avg_.at(name).data<float>();
    float* v = exp_avg_sq_.at(name).data<float>();
    const float* p = target.old.data<float>();
    float* out = target.out.data<float>();
    const float* g = grads[i].data<float>();
    cpu::parallel_for(target.old.numel(), cpu::kElementGrain,
                      [&](std::int64_t k0, std::int64_t k1) {
                        for (std::int64_t k = k0; k < k1; ++k) {
                          m[k] = b1 * m[k] + (1.0f - b1) * g[k];
                          v[k] = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
                          const float denom = std::sqrt(v[k]) * inv_sqrt_bc2 + eps;
                          out[k] = p[k] * decay - step_size * m[k] / denom;
                        }
                      });
  }
  ++steps_;
}

ParamSet AdamW::state() const {
  std::vector<std::string> names;
  for (const auto& [name, buf] : exp_avg_) names.push_back(name);
  std::sort(names.begin(), names.end());
  ParamSet s;
  for (const std::string& name : names) {
    s.add("exp_avg." + name, exp_avg_.at(name).clone());
    s.add("exp_avg_sq." + name, exp_avg_sq_.at(name).clone());
  }
  return s;
}

void AdamW::load_state(const ParamSet& state, std::int64_t steps) {
  exp_avg_.clear();
  exp_avg_sq_.clear();
  for (std::int64_t i = 0; i < state.size(); ++i) {
    const std::string& name = state.name(i);
    if (name.starts_with("exp_avg_sq.")) {
      exp_avg_sq_.emplace(name.substr(11), state[i].clone());
    } else if (name.starts_with("exp_avg.")) {
      exp_avg_.emplace(name.substr(8), state[i].clone());
    } else {
      throw std::invalid_argument("optimizer adamw: unexpected state entry '" + name + "'");
    }
  }
  if (exp_avg_.size() != exp_avg_sq_.size()) {
    throw std::invalid_argument("optimizer adamw: state has unpaired moments");
  }
  steps_ = steps;
}

}  // namespace tandem::models
