#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "models/optimizer.hpp"

namespace tandem::models {

// How an asynchronous schedule's stage corrects for the staleness of its gradients
// (docs/training.md#delay-correction).
enum class AsyncCorrection {
  none,
  weight_prediction,  // PipeOptim (arXiv 2312.00839) / SpecTrain: predict the weights d ahead
  nesterov,           // a Nesterov look-ahead along the momentum by the delay (arXiv 2505.01099)
};

std::string_view async_correction_name(AsyncCorrection c);
// Throws std::invalid_argument listing the names for an unknown one.
AsyncCorrection parse_async_correction(std::string_view name);

// The factor c of W_version = W + c * (W - W_prev), W the master weights after an update and
// W_prev before it, for a stage whose gradients arrive `delay` updates late:
// weight-prediction c = delay (the last update repeated delay times); nesterov
// c = mu + mu^2 + ... + mu^delay (what `delay` further steps would move if no new gradient
// came and the momentum decayed by mu each step). none: 0.
double correction_factor(AsyncCorrection c, int delay, double momentum);

// The momentum coefficient mu the nesterov correction looks ahead with: SGD's momentum, AdamW's
// beta1.
double correction_momentum(const OptimizerSpec& spec);

// An optimizer that keeps f32 master weights of its own, applies the inner optimizer's update
// to them, and writes the corrected weights W + c * (W - W_prev) (correction_factor) into the
// parameters, which become the stage's next version. The gradients step() takes are those of
// such corrected weights; the master never leaves the optimizer but through state(), as
// "master.<parameter>" beside the inner optimizer's entries, so a checkpoint resumes bit for
// bit. Buffers (batch norm's running statistics) are copied, never extrapolated. Never fused:
// the update is not an affine function of the parameters it writes.
class DelayCorrected final : public Optimizer {
 public:
  DelayCorrected(std::unique_ptr<Optimizer> inner, AsyncCorrection correction, int delay,
                 double momentum);
  using Optimizer::step;
  void step(ParamSet& params, const ParamSet& grads, const Kernels& kernels) override;
  ParamSet state() const override;
  void check_state(const ParamSet& state, const ParamSet& params) const override;

  double factor() const { return factor_; }
  int delay() const { return delay_; }
  // The master weights after the last update (empty before the first).
  const ParamSet& master() const { return master_; }

 private:
  void replace_state(const ParamSet& state, const ParamSet& params) override;
  std::unique_ptr<Optimizer> inner_;
  int delay_;
  double factor_;
  ParamSet master_;
  ParamSet before_;  // the master before the update: kept, so no temporary dies mid-stream
  // Loaded inner state: the inner optimizer takes it with steps() at the next step (load_state
  // sets steps() only after replace_state).
  std::optional<ParamSet> pending_inner_;
  bool inner_attached_ = false;
};

// make_optimizer(spec), wrapped in DelayCorrected unless `correction` is none. Throws
// std::invalid_argument naming async_correction when the correction does not fit the optimizer
// (nesterov needs a momentum), or the delay is negative.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, AsyncCorrection correction,
                                          int delay);

}  // namespace tandem::models
