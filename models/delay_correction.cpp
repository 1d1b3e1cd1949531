#include "models/delay_correction.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "models/detail/checks.hpp"
#include "models/detail/optimizer_util.hpp"
#include "models/kernels/kernels.hpp"

namespace tandem::models {

namespace {

constexpr std::string_view kMaster = "master.";

// A copy of `src` made through `k`, so a cuda update stays on its stream.
Tensor copy_on(const Kernels& k, const Tensor& src) {
  Tensor out = k.empty(src.shape(), src.dtype());
  k.copy(detail::ptr(src), detail::ptr(out), src.numel());
  return out;
}

}  // namespace

std::string_view async_correction_name(AsyncCorrection c) {
  switch (c) {
    case AsyncCorrection::weight_prediction:
      return "weight-prediction";
    case AsyncCorrection::nesterov:
      return "nesterov";
    default:
      return "none";
  }
}

AsyncCorrection parse_async_correction(std::string_view name) {
  for (AsyncCorrection c :
       {AsyncCorrection::none, AsyncCorrection::weight_prediction, AsyncCorrection::nesterov}) {
    if (name == async_correction_name(c)) return c;
  }
  throw std::invalid_argument("unknown async correction '" + std::string(name) +
                              "' (expected none, weight-prediction or nesterov)");
}

double correction_factor(AsyncCorrection c, int delay, double momentum) {
  switch (c) {
    case AsyncCorrection::weight_prediction:
      return delay;
    case AsyncCorrection::nesterov: {
      double sum = 0, power = 1;
      for (int k = 1; k <= delay; ++k) {
        power *= momentum;
        sum += power;
      }
      return sum;
    }
    default:
      return 0;
  }
}

double correction_momentum(const OptimizerSpec& spec) {
  return spec.kind == "adamw" ? spec.beta1 : spec.momentum;
}

DelayCorrected::DelayCorrected(std::unique_ptr<Optimizer> inner, AsyncCorrection correction,
                               int delay, double momentum)
    : Optimizer(inner->lr(), "optimizer with " + std::string(async_correction_name(correction))),
      inner_(std::move(inner)),
      delay_(delay),
      factor_(correction_factor(correction, delay, momentum)) {
  if (delay < 0) {
    throw std::invalid_argument(who_ + ": delay must be >= 0, got " + std::to_string(delay));
  }
  if (correction == AsyncCorrection::nesterov && !(momentum > 0 && momentum < 1)) {
    throw std::invalid_argument(
        "field 'async_correction': nesterov looks ahead along the momentum, which needs a "
        "momentum coefficient in (0, 1) (sgd momentum, adamw beta1), got " +
        std::to_string(momentum));
  }
}

void DelayCorrected::step(ParamSet& params, const ParamSet& grads, const Kernels& k) {
  detail::check_step_args(params, grads, who_, k.device());
  if (!inner_attached_ && model() != nullptr) {
    inner_->attach(*model());
    inner_attached_ = true;
  }
  if (master_.empty()) {
    // Version 0 (the initial weights) is not corrected: there is no update to extrapolate yet.
    for (std::int64_t i = 0; i < params.size(); ++i)
      master_.add(params.name(i), copy_on(k, params[i]));
  }
  if (pending_inner_) {
    inner_->load_state(*pending_inner_, steps_, master_);
    pending_inner_.reset();
  }
  if (before_.empty()) {
    for (std::int64_t i = 0; i < master_.size(); ++i)
      before_.add(master_.name(i), copy_on(k, master_[i]));
  } else {
    for (std::int64_t i = 0; i < master_.size(); ++i)
      k.copy(detail::ptr(master_[i]), detail::ptr(before_[i]), master_[i].numel());
  }
  inner_->set_lr(lr_);
  inner_->step(master_, grads, k);
  const auto f = static_cast<float>(factor_);
  for (std::int64_t i = 0; i < params.size(); ++i) {
    const Tensor& w = master_[i];
    // A new tensor always: the old one may be a stashed version that forwards still read.
    Tensor out = copy_on(k, w);
    if (f != 0.0f && !is_buffer(params.name(i))) {
      // out = w + f * (w - before), in this order of roundings (tests compute it the same way).
      float* d = detail::ptr(before_[i]);
      k.scale(d, w.numel(), -1.0f);
      k.add(detail::ptr(w), d, d, w.numel());
      k.scale(d, w.numel(), f);
      k.add(detail::ptr(w), d, detail::ptr(out), w.numel());
    }
    params[i] = out;
  }
  ++steps_;
}

ParamSet DelayCorrected::state() const {
  ParamSet s = pending_inner_ ? pending_inner_->clone() : inner_->state();
  for (std::int64_t i = 0; i < master_.size(); ++i)
    s.add(std::string(kMaster) + master_.name(i), master_[i].clone());
  return s;
}

void DelayCorrected::check_state(const ParamSet& state, const ParamSet& params) const {
  ParamSet inner;
  std::int64_t masters = 0;
  for (std::int64_t i = 0; i < state.size(); ++i) {
    const std::string& entry = state.name(i);
    if (!entry.starts_with(kMaster)) {
      inner.add(entry, state[i]);
      continue;
    }
    const std::string param = entry.substr(kMaster.size());
    if (!params.contains(param)) refuse_state(entry, "names no parameter ('" + param + "')");
    check_like(entry, state[i], param, params.at(param));
    ++masters;
  }
  if (masters > 0 || !inner.empty()) {
    // Every parameter, buffers too: the master is a whole copy of the stage's weights.
    for (const std::string& param : params.names()) {
      const std::string entry = std::string(kMaster) + param;
      if (!state.contains(entry)) {
        refuse_state(entry,
                     "missing: the state of a delay-corrected optimizer that has taken a step "
                     "holds master weights of every parameter");
      }
    }
  }
  // The inner optimizer's check must know the buffers (their state is not asked for).
  if (model() != nullptr) inner_->attach(*model());
  inner_->check_state(inner, params);
}

void DelayCorrected::replace_state(const ParamSet& state, const ParamSet& params) {
  master_ = ParamSet();
  before_ = ParamSet();
  ParamSet inner;
  for (std::int64_t i = 0; i < state.size(); ++i) {
    if (!state.name(i).starts_with(kMaster)) inner.add(state.name(i), state[i].clone());
  }
  // In the parameters' order: step() pairs master and parameters by index.
  for (const std::string& param : params.names()) {
    const std::string entry = std::string(kMaster) + param;
    if (state.contains(entry)) master_.add(param, copy_for(state.at(entry), params.at(param)));
  }
  pending_inner_ = std::move(inner);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, AsyncCorrection correction,
                                          int delay) {
  std::unique_ptr<Optimizer> inner = make_optimizer(spec);
  if (correction == AsyncCorrection::none) return inner;
  return std::make_unique<DelayCorrected>(std::move(inner), correction, delay,
                                          correction_momentum(spec));
}

}  // namespace tandem::models
