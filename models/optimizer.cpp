#include "models/optimizer.hpp"

#include <stdexcept>

#include "models/adamw.hpp"
#include "models/detail/optimizer_util.hpp"
#include "models/kernels/kernels.hpp"
#include "models/sgd.hpp"
#include "models/sim_clock.hpp"

namespace tandem::models {

void Optimizer::sim_step(ParamSet& params, const ParamSet& grads, SimClock& clock) {
  detail::check_step_args(params, grads, who_, Device::sim());
  clock.charge(clock.costs().optimizer_step_ms, who_ + " step");
  ++steps_;
}

void Optimizer::step(ParamSet& params, const ParamSet& grads) {
  step(params, grads, cpu_kernels());
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec) {
  if (spec.kind == "sgd") return std::make_unique<Sgd>(spec);
  if (spec.kind == "adamw") return std::make_unique<AdamW>(spec);
  throw std::invalid_argument("optimizer: field 'kind' is '" + spec.kind +
                              "' (expected sgd or adamw)");
}

}  // namespace tandem::models
