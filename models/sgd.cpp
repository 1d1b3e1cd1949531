#include "models/sgd.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>

#include "models/detail/checks.hpp"
#include "models/detail/optimizer_util.hpp"
#include "models/kernels/kernels.hpp"

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

void Sgd::step(ParamSet& params, const ParamSet& grads, const Kernels& k) {
  detail::check_step_args(params, grads, who_, k.device());
  for (std::int64_t i = 0; i < params.size(); ++i) {
    if (is_buffer(params.name(i))) continue;  // its layer updates it below
    detail::UpdateTarget t = detail::update_target(params, i, k);
    float* buf = nullptr;
    bool first = false;
    // Momentum 0 keeps no buffer (as the float the update uses, like the kernels).
    if (static_cast<float>(momentum_) != 0.0f) {
      auto it = momentum_buffers_.find(params.name(i));
      first = it == momentum_buffers_.end();
      if (first) {
        it = momentum_buffers_.emplace(params.name(i), k.empty(t.old.shape())).first;
      }
      buf = detail::ptr(it->second);
    }
    k.sgd_update(detail::ptr(t.old), detail::ptr(grads[i]), buf, detail::ptr(t.out), t.old.numel(),
                 lr_, weight_decay_, momentum_, nesterov_, first);
  }
  update_buffers(params, grads, k);
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

namespace {

constexpr std::string_view kMomentum = "momentum.";

}  // namespace

void Sgd::check_state(const ParamSet& state, const ParamSet& params) const {
  for (std::int64_t i = 0; i < state.size(); ++i) {
    const std::string& entry = state.name(i);
    if (!entry.starts_with(kMomentum)) refuse_state(entry, "not momentum.<parameter>");
    const std::string param = entry.substr(kMomentum.size());
    if (!params.contains(param)) refuse_state(entry, "names no parameter ('" + param + "')");
    check_like(entry, state[i], param, params.at(param));
  }
  if (state.empty()) return;  // no step taken yet, or no momentum
  for (const std::string& param : params.names()) {
    const std::string entry = std::string(kMomentum) + param;
    if (!state.contains(entry) && !is_buffer(param)) {
      refuse_state(entry,
                   "missing: the state holds momentum buffers of other parameters, and "
                   "every parameter has one once a step is taken");
    }
  }
}

void Sgd::replace_state(const ParamSet& state, const ParamSet& params) {
  momentum_buffers_.clear();
  for (std::int64_t i = 0; i < state.size(); ++i) {
    const std::string param = state.name(i).substr(kMomentum.size());
    momentum_buffers_.emplace(param, copy_for(state[i], params.at(param)));
  }
}

}  // namespace tandem::models
