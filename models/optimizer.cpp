#include "models/optimizer.hpp"

#include <stdexcept>
#include <string>

#include "models/adamw.hpp"
#include "models/detail/optimizer_util.hpp"
#include "models/kernels/kernels.hpp"
#include "models/model.hpp"
#include "models/sgd.hpp"
#include "models/sim_clock.hpp"

namespace tandem::models {

void Optimizer::sim_step(ParamSet& params, const ParamSet& grads, SimClock& clock) {
  detail::check_step_args(params, grads, who_, Device::sim());
  clock.charge(clock.costs().optimizer_step_ms, who_ + " step");
  ++steps_;
}

void Optimizer::attach(const Model& model) {
  model_ = std::make_shared<const Model>(model);
}

bool Optimizer::is_buffer(std::string_view name) const {
  return model_ != nullptr && model_->is_buffer(name);
}

void Optimizer::update_buffers(ParamSet& params, const ParamSet& grads, const Kernels& k) const {
  if (model_ != nullptr && model_->has_buffers()) model_->update_buffers(k, params, grads);
}

void Optimizer::step(ParamSet& params, const ParamSet& grads) {
  step(params, grads, cpu_kernels());
}

void Optimizer::load_state(const ParamSet& state, std::int64_t steps, const ParamSet& params) {
  check_state(state, params);
  replace_state(state, params);
  steps_ = steps;
}

void Optimizer::refuse_state(const std::string& entry, const std::string& detail) const {
  throw OptimizerStateError(who_, entry, detail);
}

void Optimizer::check_like(const std::string& entry, const Tensor& state,
                           const std::string& param_name, const Tensor& param) const {
  if (!state.defined()) refuse_state(entry, "undefined tensor");
  if (state.shape() != param.shape()) {
    refuse_state(entry, "shape " + shape_str(state.shape()) + ", but parameter '" + param_name +
                            "' has shape " + shape_str(param.shape()));
  }
  if (state.dtype() != param.dtype()) {
    refuse_state(entry, "dtype " + std::string(dtype_name(state.dtype())) + ", but parameter '" +
                            param_name + "' is " + std::string(dtype_name(param.dtype())));
  }
}

Tensor Optimizer::copy_for(const Tensor& t, const Tensor& param) {
  const Device device = param.device();
  if (!device.has_data() || device == t.device()) return t.clone();
  return t.to(device);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec) {
  if (spec.kind == "sgd") return std::make_unique<Sgd>(spec);
  if (spec.kind == "adamw") return std::make_unique<AdamW>(spec);
  throw std::invalid_argument("optimizer: field 'kind' is '" + spec.kind +
                              "' (expected sgd or adamw)");
}

}  // namespace tandem::models
