#include "models/optimizer.hpp"

#include <stdexcept>

#include "models/adamw.hpp"
#include "models/sgd.hpp"

namespace tandem::models {

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec) {
  if (spec.kind == "sgd") return std::make_unique<Sgd>(spec);
  if (spec.kind == "adamw") return std::make_unique<AdamW>(spec);
  throw std::invalid_argument("optimizer: field 'kind' is '" + spec.kind +
                              "' (expected sgd or adamw)");
}

}  // namespace tandem::models
