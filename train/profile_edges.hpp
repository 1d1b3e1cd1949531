#pragma once
// A graph model's edges in its profile (planner/profile.hpp): each layer's inputs, each
// layer's own output and the model input's size, from which the planner counts what crosses
// each cut (planner/cut_bytes.hpp) as Model::cut_elements does.
#include <cstdint>

#include "models/model.hpp"
#include "planner/profile.hpp"

namespace tandem::train {

// For a graph model: sets every layer's inputs, its activation_bytes to its own output and
// the profile's input_bytes, at 4 bytes an element for `minibatch` samples (what
// Model::cut_elements counts). A chain's profile is left as it is. The profile must hold one
// entry per layer.
void add_profile_edges(const models::Model& model, std::int64_t minibatch,
                       planner::Profile& profile);

}  // namespace tandem::train
