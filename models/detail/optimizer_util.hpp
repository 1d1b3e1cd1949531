#pragma once

#include <string>

#include "models/kernels/kernels.hpp"
#include "models/param_set.hpp"

namespace tandem::models::detail {

// Throws std::invalid_argument (naming the optimizer and the entry) unless grads has params'
// names, shapes and f32 tensors, all on `device`.
void check_step_args(const ParamSet& params, const ParamSet& grads, const std::string& who,
                     Device device);

// The tensor an update writes: params[i] itself when no other handle shares its storage,
// otherwise a new tensor that replaces it in params (copy-on-write: stashed versions keep their
// values), allocated through `k`. The update reads the old values from `old`.
struct UpdateTarget {
  Tensor old;
  Tensor out;
};
UpdateTarget update_target(ParamSet& params, std::int64_t i, const Kernels& k);

}  // namespace tandem::models::detail
