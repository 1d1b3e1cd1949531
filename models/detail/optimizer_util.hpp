#pragma once

#include <string>

#include "models/param_set.hpp"

namespace tandem::models::detail {

// Throws std::invalid_argument (naming the optimizer and the entry) unless grads has params'
// names, shapes and f32 tensors, all on the CPU (all on the sim device when `sim`).
void check_step_args(const ParamSet& params, const ParamSet& grads, const std::string& who,
                     bool sim = false);

// The tensor an update writes: params[i] itself when no other handle shares its storage,
// otherwise a new tensor that replaces it in params (copy-on-write: stashed versions keep their
// values). The update reads the old values from `old`.
struct UpdateTarget {
  Tensor old;
  Tensor out;
};
UpdateTarget update_target(ParamSet& params, std::int64_t i);

}  // namespace tandem::models::detail
