#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::models {

// One node of a graph model: a layer and the tensors it reads.
struct GraphNode {
  std::string name;                 // unique among the nodes and the model input
  std::string layer;                // linear | relu | gelu | layer_norm | dropout | flatten |
                                    // add | concat | multiply
  std::vector<std::string> inputs;  // empty: the previous node's output (the model input first)
  std::int64_t out = 0;             // linear: output features
  std::string activation = "none";  // linear: none | relu | gelu, fused after the product
  float p = 0.0f;                   // dropout: probability
};

// A model as an ordered list of layers, each naming its inputs (docs/config.md, "Graphs"). The
// order is the one stage cuts follow; a node reads the model input or any earlier node. The
// last node's output is what the loss reads.
struct GraphSpec {
  std::string input_name = "input";
  std::vector<std::int64_t> input_shape;  // per sample
  std::vector<GraphNode> nodes;
};

}  // namespace tandem::models
