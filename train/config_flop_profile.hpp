#pragma once
// A config's model as a planner profile from its layers' FLOP counts at a nominal rate: what
// `schedule: auto` ranks a config's own stages with when it names no measured profile, and
// what `tandem train --dry-run` predicts with.
#include <cstdint>

#include "models/model.hpp"
#include "planner/profile.hpp"

namespace tandem::train {

// A nominal CPU core: OpenBLAS sgemm runs at ~100 GFLOP/s on one core here, and small layers
// reach far less.
inline constexpr double kNominalFlopsPerSecond = 50e9;

// Per layer, for a minibatch of `minibatch` samples: forward, backward (input and weight
// gradients) and its weight part at kNominalFlopsPerSecond, no fixed parts; 4-byte floats for
// the weights, the output (activation_bytes) and the kept output (memory_bytes).
planner::Profile flop_profile(const models::Model& model, int64_t minibatch);

}  // namespace tandem::train
