#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "models/param_set.hpp"

namespace tandem::models {

class Kernels;
class Model;
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

// Optimizer state that does not fit the parameters it is loaded for. what(): "optimizer adamw:
// state 'exp_avg.0.weight': shape [3], but parameter '0.weight' has shape [3, 4]"; entry() is
// the state's name, who() the optimizer and detail() what is wrong, for readers that name the
// entry their own way (a checkpoint names the tensor in its file).
class OptimizerStateError : public std::invalid_argument {
 public:
  OptimizerStateError(std::string who, std::string entry, std::string detail)
      : std::invalid_argument(who + ": state '" + entry + "': " + detail),
        who_(std::move(who)),
        entry_(std::move(entry)),
        detail_(std::move(detail)) {}
  const std::string& who() const { return who_; }
  const std::string& entry() const { return entry_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string who_;
  std::string entry_;
  std::string detail_;
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

  // The model whose parameters step() updates, for its buffers (ParamSpec::trainable false:
  // batch norm's running statistics): step() gives them no update, no weight decay and no
  // state (check_state does not ask for theirs), and ends with Model::update_buffers, which
  // lets their layers update them from their gradient slots. Without a model every parameter is
  // trained. Every place that steps a model's parameters attaches the model first (the
  // pipeline's stages, train_step, resuming from a checkpoint); the optimizer keeps a copy
  // (copies share the layers).
  void attach(const Model& model);
  const Model* model() const { return model_.get(); }

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  std::int64_t steps() const { return steps_; }
  // State tensors named "<state>.<param name>" (momentum buffers, moments), for checkpoints.
  virtual ParamSet state() const = 0;
  // Throws OptimizerStateError unless `state` (as state() returns it) fits `params`: every
  // entry is of a known kind and names a parameter, with the parameter's shape and dtype, the
  // entries a parameter needs together are all there, and the state is empty or covers every
  // parameter. step() runs over each parameter's element count, so state loaded without this
  // check could be read and written out of bounds.
  virtual void check_state(const ParamSet& state, const ParamSet& params) const = 0;
  // check_state(state, params), then takes copies of the tensors on the parameters' device.
  void load_state(const ParamSet& state, std::int64_t steps, const ParamSet& params);

 protected:
  Optimizer(double lr, std::string who) : lr_(lr), who_(std::move(who)) {}
  // Replaces the state with copies of `state`'s tensors, which check_state accepted.
  virtual void replace_state(const ParamSet& state, const ParamSet& params) = 0;
  // A copy of state tensor `t` on `param`'s device (where step() reads it), or on t's own when
  // the parameter's device holds no data (sim).
  static Tensor copy_for(const Tensor& t, const Tensor& param);
  // Throws OptimizerStateError(who_, entry, detail).
  [[noreturn]] void refuse_state(const std::string& entry, const std::string& detail) const;
  // Refuses `state[i]` unless it has `param`'s shape and dtype.
  void check_like(const std::string& entry, const Tensor& state, const std::string& param_name,
                  const Tensor& param) const;
  // Whether parameter `name` is a buffer of the attached model (false without one).
  bool is_buffer(std::string_view name) const;
  // The buffer update that ends step(): Model::update_buffers when a model is attached.
  void update_buffers(ParamSet& params, const ParamSet& grads, const Kernels& k) const;
  double lr_;
  std::string who_;  // "optimizer sgd": prefixes error messages
  std::int64_t steps_ = 0;
  std::shared_ptr<const Model> model_;
};

// Throws std::invalid_argument naming the field for an unknown kind or invalid values.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec);

}  // namespace tandem::models
