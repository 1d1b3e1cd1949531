#pragma once
// What crosses a stage cut of a profile: every tensor produced at or before the cut and read
// after it, once per cut it spans (docs/planner.md#planning-on-graphs).
#include <vector>

#include "planner/profile.hpp"

namespace tandem::planner {

// Entry c: the bytes per minibatch (at the profile's minibatch) that a cut after layer c
// carries forward (and their gradients back): the outputs of layers <= c, and the model input,
// read by a layer > c, each tensor once however many layers beyond the cut read it (one
// message per tensor and consuming stage). The last entry is the last layer's output. For a
// chain this is exactly each layer's activation_bytes, so chain plans do not change. A skip
// edge from a to b is charged on every cut from a to b - 1, as PipeDream's optimizer does on
// its antichain cuts (the outputs of its augmented antichain).
std::vector<double> cut_bytes(const Profile& profile);

}  // namespace tandem::planner
