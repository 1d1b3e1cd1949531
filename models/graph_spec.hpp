#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::models {

// One node of a graph model: a layer and the tensors it reads.
struct GraphNode {
  std::string name;                 // unique among the nodes and the model input
  std::string layer;                // linear | relu | gelu | layer_norm | dropout | flatten |
                                    // add | concat | multiply | embedding | reshape |
                                    // lstm | seq_attention
  std::vector<std::string> inputs;  // empty: the previous node's output (the model input first)
  std::int64_t out = 0;             // linear: output features
  std::string activation = "none";  // linear: none | relu | gelu, fused after the product
  float p = 0.0f;                   // dropout: probability
  std::int64_t vocab = 0;           // embedding: token ids in [0, vocab); `out` is the width
  std::vector<std::int64_t> shape;  // reshape: the per-sample shape
  std::int64_t hidden = 0;          // lstm: state width per direction
  bool bidirectional = false;       // lstm: a reversed direction too, concatenated
};

// A named model input: per-sample shape and dtype ("f32" or "i32").
struct GraphInput {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype = "f32";
};

// A model as an ordered list of layers, each naming its inputs (docs/config.md, "Graphs"). The
// order is the one stage cuts follow; a node reads the model input or any earlier node. The
// last node's output is what the loss reads.
//
// The inputs: `inputs` when given, else one f32 input `input_name` of `input_shape`. Two or more
// inputs travel packed (models/input_pack.hpp): one [batch, sum of their per-sample sizes] tensor
// of their common dtype, each input's values flattened in declaration order; a node that reads
// an input reads its columns, reshaped (models/layers/input_view.hpp).
struct GraphSpec {
  std::string input_name = "input";
  std::vector<std::int64_t> input_shape;  // per sample
  std::vector<GraphInput> inputs;
  std::vector<GraphNode> nodes;

  // `inputs`, or the single input of input_name and input_shape.
  std::vector<GraphInput> declared_inputs() const {
    if (!inputs.empty()) return inputs;
    return {GraphInput{input_name, input_shape, "f32"}};
  }
};

}  // namespace tandem::models
