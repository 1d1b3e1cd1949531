#include "models/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>

#include "models/detail/checks.hpp"
#include "models/detail/optimizer_util.hpp"
#include "models/kernels/kernels.hpp"

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

void AdamW::step(ParamSet& params, const ParamSet& grads, const Kernels& k) {
  detail::check_step_args(params, grads, who_, k.device());
  for (std::int64_t i = 0; i < params.size(); ++i) {
    if (is_buffer(params.name(i))) continue;  // its layer updates it below
    detail::UpdateTarget target = detail::update_target(params, i, k);
    const std::string& name = params.name(i);
    if (!exp_avg_.contains(name)) {
      for (auto* moments : {&exp_avg_, &exp_avg_sq_}) {
        Tensor zero = k.empty(target.old.shape());
        k.scale(detail::ptr(zero), zero.numel(), 0.0f);
        moments->emplace(name, zero);
      }
    }
    k.adamw_update(detail::ptr(target.old), detail::ptr(grads[i]), detail::ptr(exp_avg_.at(name)),
                   detail::ptr(exp_avg_sq_.at(name)), detail::ptr(target.out), target.old.numel(),
                   lr_, weight_decay_, beta1_, beta2_, eps_, steps_ + 1);
  }
  update_buffers(params, grads, k);
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

namespace {

constexpr std::string_view kExpAvg = "exp_avg.";
constexpr std::string_view kExpAvgSq = "exp_avg_sq.";

}  // namespace

void AdamW::check_state(const ParamSet& state, const ParamSet& params) const {
  for (std::int64_t i = 0; i < state.size(); ++i) {
    const std::string& entry = state.name(i);
    const bool sq = entry.starts_with(kExpAvgSq);
    if (!sq && !entry.starts_with(kExpAvg)) {
      refuse_state(entry, "neither exp_avg.<parameter> nor exp_avg_sq.<parameter>");
    }
    const std::string param = entry.substr((sq ? kExpAvgSq : kExpAvg).size());
    if (!params.contains(param)) refuse_state(entry, "names no parameter ('" + param + "')");
    const std::string partner = std::string(sq ? kExpAvg : kExpAvgSq) + param;
    if (!state.contains(partner)) refuse_state(entry, "has no partner '" + partner + "'");
    check_like(entry, state[i], param, params.at(param));
  }
  if (state.empty()) return;  // no step taken yet
  for (const std::string& param : params.names()) {
    const std::string entry = std::string(kExpAvg) + param;
    if (!state.contains(entry) && !is_buffer(param)) {
      refuse_state(entry,
                   "missing: the state holds moments of other parameters, and every "
                   "parameter has them once a step is taken");
    }
  }
}

void AdamW::replace_state(const ParamSet& state, const ParamSet& params) {
  exp_avg_.clear();
  exp_avg_sq_.clear();
  for (std::int64_t i = 0; i < state.size(); ++i) {
    const std::string& entry = state.name(i);
    const bool sq = entry.starts_with(kExpAvgSq);
    const std::string param = entry.substr((sq ? kExpAvgSq : kExpAvg).size());
    (sq ? exp_avg_sq_ : exp_avg_).emplace(param, copy_for(state[i], params.at(param)));
  }
}

}  // namespace tandem::models
