#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "models/param_set.hpp"

namespace tandem::models {

class Kernels;
class SimClock;

struct OptimizerSpec {
  std::string kind = "sgd";  // "sgd" | "adamw"
  double lr = 0.01;
  double momentum = 0.0;      // sgd
  double weight_decay = 0.0;  // sgd: added to the gradient (L2); adamw: decoupled
  bool nesterov = false;      // sgd, needs momentum > 0
  double beta1 = 0.9;         // adamw
  double beta2 = 0.999;       // adamw
  double eps = 1e-8;          // adamw
};

// An update p <- beta * p + alpha * g that needs no state: the gradient can be written straight
// into the weights (GradSink{params, alpha, beta}) and no gradient tensor is ever stored.
struct FusedUpdate {
  float alpha = 0;
  float beta = 1;
};

// Updates parameters from gradients, with state per parameter name (momentum buffers, Adam
// moments). Deterministic. Shared parameter tensors are updated copy-on-write: when another
// handle (a stashed version) shares a tensor's storage, the new values go to a new tensor that
// replaces it in `params`, and the old version is left untouched.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update, computed through `kernels` (those of the device the parameters live on; a cuda
  // executor passes its own, so the update is enqueued on its stream). Throws
  // std::invalid_argument when grads' names or shapes differ from params', or a tensor is not
  // on kernels.device().
  virtual void step(ParamSet& params, const ParamSet& grads, const Kernels& kernels) = 0;
  // The update on the CPU.
  void step(ParamSet& params, const ParamSet& grads);
  // One update of sim parameters (the sim device keeps no data): checks names, shapes and that
  // every tensor is on sim, counts the step, keeps no state, and charges
  // SimCosts::optimizer_step_ms to the clock.
  void sim_step(ParamSet& params, const ParamSet& grads, SimClock& clock);
  // The stateless affine update equal to step() when one exists (plain SGD), for fusing.
  virtual std::optional<FusedUpdate> fused_update() const { return std::nullopt; }
  // Counts an update applied through fused_update() (keeps steps() right).
  void note_fused_step() { ++steps_; }

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  std::int64_t steps() const { return steps_; }
  // State tensors named "<state>.<param name>" (momentum buffers, moments), for checkpoints.
  virtual ParamSet state() const = 0;
  virtual void load_state(const ParamSet& state, std::int64_t steps) = 0;

 protected:
  Optimizer(double lr, std::string who) : lr_(lr), who_(std::move(who)) {}
  double lr_;
  std::string who_;  // "optimizer sgd": prefixes error messages
  std::int64_t steps_ = 0;
};

// Throws std::invalid_argument naming the field for an unknown kind or invalid values.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec);

}  // namespace tandem::models
