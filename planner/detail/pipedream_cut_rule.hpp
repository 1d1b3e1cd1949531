#pragma once
// What PipeDream's optimizer (msr-fiddle/pipedream, optimizer_graph_hierarchical.py with
// graph/graph.py) charges at a cut of a graph: CostModel::pipedream's activations.
#include <vector>

#include "planner/profile.hpp"

namespace tandem::planner::detail {

// Entry c: PipeDream's output_activation_size of the state whose nodes are layers 0..c (a
// prefix of the profile's topological order): the activations of its "augmented antichain",
// the ideal's maximal layers X plus every predecessor P of some X with a reader that is
// neither X nor a predecessor of X. That counts what crosses the cut, and also an output whose
// readers all lie before the cut on another branch (graph.py's augment_antichain looks at one
// X at a time); the model input is never charged (PipeDream removes its Input nodes). The last
// entry is the last layer's output. For a chain it equals activation_bytes. O(N^2 E) at worst.
std::vector<double> pipedream_cut_bytes(const Profile& profile);

}  // namespace tandem::planner::detail
