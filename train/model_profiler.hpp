#pragma once
// Measures a config's model layer by layer for the planner (`tandem profile`): each layer's
// forward, input gradient (B) and weight gradient (W) on a minibatch of the configured data,
// on the CPU, in training mode, in the order training runs them (F, then B, then W, each
// round on a fresh forward's saved state). Times are medians over `repeats` rounds after
// `warmup` untimed ones.
//
// Layer 0's input gradient is never computed in training (nothing upstream needs it), so its
// B is 0 and its W is its whole fused backward without dx, as Model::backward runs it.
// memory_bytes counts the tensors a layer's forward keeps for its backward (a tensor kept
// twice by one layer counts once; one kept by two adjacent layers, such as an activation the
// next layer saves as its input, counts for both: each keeps it when a stage cut falls
// between them). The fixed parts come from a second measurement on one sample:
// fixed = (B t(1) - t(B)) / (B - 1), the intercept of the line through both, kept within
// [0, t(B)]. STEP is the config's optimizer updating the layer's weights (its own copy) from
// the gradients W wrote, once per round.
#include <cstdint>
#include <functional>

#include "planner/profile.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

struct ProfileOptions {
  int64_t minibatch = 0;    // samples; 0: the config's train.minibatch
  int repeats = 10;         // timed rounds per layer (>= 1)
  int warmup = 2;           // untimed rounds first (>= 0)
  bool fixed_parts = true;  // also time one sample to estimate the fixed parts
  bool step = true;         // also time the config's optimizer on each layer's weights
  // Copies of every measurement run at once, each on its own thread, weights and input, and on
  // cores / concurrent threads of the kernels' pool: what each of `concurrent` cpu stages of
  // one process sees when they all compute (they share the cores and the memory bandwidth).
  int concurrent = 1;
};

// Called after each layer with its 0-based index, the layer count and its entry.
using ProfileProgress = std::function<void(int, int, const planner::LayerProfile&)>;

// Throws JobError when the data does not fit the model or holds fewer samples than the
// minibatch, std::invalid_argument for bad options.
planner::Profile profile_model(const JobSpec& job, const ProfileOptions& options,
                               const ProfileProgress& progress = {});

}  // namespace tandem::train
