#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::models {

// One node of a graph model: a layer and the tensors it reads.
struct GraphNode {
  std::string name;                 // unique among the nodes and the model input
  std::string layer;                // linear | relu | gelu | layer_norm | dropout | flatten |
                                    // add | concat | multiply | embedding | reshape | conv2d |
                                    // batch_norm | max_pool | avg_pool | global_avg_pool |
                                    // lstm | seq_attention | sim (sim stages only:
                                    // models/layers/sim_node.hpp)
  std::vector<std::string> inputs;  // empty: the previous node's output (the model input first)
  std::int64_t out = 0;             // linear: output features; conv2d: output channels
  std::string activation = "none";  // linear: none | relu | gelu, fused after the product;
                                    // conv2d: none | relu
  // conv2d, max_pool, avg_pool: the window (kernel_h when kernel_w is given) and its stride and
  // padding. kernel_w 0 and pad_w -1: as kernel and pad (conv2d only: the pools are square).
  // stride 0: 1 for conv2d, the kernel for the pools.
  std::int64_t kernel = 0;
  std::int64_t kernel_w = 0;
  std::int64_t stride = 0;
  std::int64_t pad = 0;
  std::int64_t pad_w = -1;
  float p = 0.0f;                   // dropout: probability
  std::int64_t vocab = 0;           // embedding: token ids in [0, vocab); `out` is the width
  std::vector<std::int64_t> shape;  // reshape: the per-sample shape
  int axis = -1;                    // concat: the joined dimension (1: channels; -1: the last)
  std::int64_t hidden = 0;          // lstm: state width per direction
  bool bidirectional = false;       // lstm: a reversed direction too, concatenated
  std::int64_t params = 0;          // sim: weights (f32 elements); `out` is its width
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
// inputs travel packed (models/input_layout.hpp): one [batch, sum of their per-sample sizes]
// tensor of their common dtype (f32 where f32 and i32 mix, ids as exact floats), each input's
// values flattened in declaration order; a node that reads an input reads its columns, reshaped
// (models/layers/input_view.hpp).
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
