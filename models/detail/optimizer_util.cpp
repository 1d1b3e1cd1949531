#include "models/detail/optimizer_util.hpp"

#include <stdexcept>

namespace tandem::models::detail {

void check_step_args(const ParamSet& params, const ParamSet& grads, const std::string& who,
                     Device device) {
  const bool sim = device.is_sim();
  if (params.size() != grads.size()) {
    throw std::invalid_argument(who + ": " + std::to_string(params.size()) + " parameters but " +
                                std::to_string(grads.size()) + " gradients");
  }
  for (std::int64_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    const Tensor& g = grads[i];
    if (params.name(i) != grads.name(i)) {
      throw std::invalid_argument(who + ": parameter " + std::to_string(i) + " is '" +
                                  params.name(i) + "' but its gradient is '" + grads.name(i) + "'");
    }
    if (p.shape() != g.shape() || p.dtype() != DType::f32 || g.dtype() != DType::f32 ||
        p.device() != device || g.device() != device) {
      const bool any_sim = p.device().is_sim() || g.device().is_sim();
      throw std::invalid_argument(
          who + ": '" + params.name(i) + "' is " + p.describe() + " but its gradient is " +
          g.describe() + " (need equal shapes, f32, " + device.str() + ")" +
          (!sim && any_sim ? "; sim parameters take Optimizer::sim_step" : ""));
    }
  }
}

UpdateTarget update_target(ParamSet& params, std::int64_t i, const Kernels& k) {
  if (params[i].storage_unique()) return {params[i], params[i]};
  Tensor old = params[i];
  params[i] = k.empty(old.shape(), old.dtype());
  return {old, params[i]};
}

}  // namespace tandem::models::detail
