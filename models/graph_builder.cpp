#include "models/graph_builder.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "models/input_layout.hpp"
#include "models/layers/activation.hpp"
#include "models/layers/avg_pool2d.hpp"
#include "models/layers/batch_norm2d.hpp"
#include "models/layers/conv2d.hpp"
#include "models/layers/dropout.hpp"
#include "models/layers/embedding.hpp"
#include "models/layers/flatten.hpp"
#include "models/layers/global_avg_pool2d.hpp"
#include "models/layers/input_view.hpp"
#include "models/layers/layer_norm.hpp"
#include "models/layers/linear.hpp"
#include "models/layers/lstm.hpp"
#include "models/layers/max_pool2d.hpp"
#include "models/layers/merge_layer.hpp"
#include "models/layers/reshape.hpp"
#include "models/layers/seq_attention.hpp"
#include "models/layers/sim_node.hpp"

namespace tandem::models {
namespace {

using Layers = std::vector<std::shared_ptr<const Layer>>;

[[noreturn]] void fail(const GraphNode& n, std::size_t index, const std::string& why) {
  throw GraphError(static_cast<int>(index),
                   "model graph node " + std::to_string(index) + " '" + n.name + "': " + why);
}

cpu::Activation activation_of(const GraphNode& n, std::size_t index) {
  if (n.activation == "none") return cpu::Activation::none;
  if (n.activation == "relu") return cpu::Activation::relu;
  if (n.activation == "gelu") return cpu::Activation::gelu;
  fail(n, index, "unknown activation '" + n.activation + "' (expected none, relu or gelu)");
}

bool image_layer(const std::string& kind) {
  return kind == "conv2d" || kind == "batch_norm" || kind == "max_pool" || kind == "avg_pool" ||
         kind == "global_avg_pool";
}

// The layers over NCHW images: `in` is [batch, C, H, W].
std::shared_ptr<const Layer> make_image_layer(const GraphNode& n, std::size_t index,
                                              const Shape& in) {
  if (in.size() != 4) {
    fail(n, index,
         n.layer + " reads images [batch, channels, height, width], given " + shape_str(in) +
             " (a reshape node makes them)");
  }
  if (n.layer == "batch_norm") return std::make_shared<BatchNorm2d>(in[1]);
  if (n.layer == "global_avg_pool") return std::make_shared<GlobalAvgPool2d>();
  if (n.kernel <= 0) fail(n, index, n.layer + " needs 'kernel' > 0");
  if (n.stride < 0) fail(n, index, n.layer + " needs 'stride' >= 0");
  if (n.pad < 0) fail(n, index, n.layer + " needs 'pad' >= 0");
  if (n.layer == "conv2d") {
    if (n.out <= 0) fail(n, index, "conv2d needs 'out' > 0 (output channels)");
    if (n.kernel_w < 0) fail(n, index, "conv2d needs 'kernel_w' > 0");
    if (n.pad_w < -1) fail(n, index, "conv2d needs 'pad_w' >= 0");
    if (n.activation != "none" && n.activation != "relu") {
      fail(n, index, "conv2d: unknown activation '" + n.activation + "' (expected none or relu)");
    }
    const auto act = n.activation == "relu" ? cpu::Activation::relu : cpu::Activation::none;
    return std::make_shared<Conv2d>(in[1], n.out, n.kernel, n.kernel_w == 0 ? n.kernel : n.kernel_w,
                                    n.stride == 0 ? 1 : n.stride, n.pad,
                                    n.pad_w < 0 ? n.pad : n.pad_w, act);
  }
  if (2 * n.pad > n.kernel) {
    fail(n, index,
         n.layer + ": 'pad' " + std::to_string(n.pad) + " is more than half the kernel " +
             std::to_string(n.kernel));
  }
  if (n.layer == "max_pool") return std::make_shared<MaxPool2d>(n.kernel, n.stride, n.pad);
  return std::make_shared<AvgPool2d>(n.kernel, n.stride, n.pad);
}

// The sequence layers (lstm, seq_attention) of node `n` reading tensors of `in` shapes.
std::shared_ptr<const Layer> sequence_layer(const GraphNode& n, std::size_t index,
                                            const std::vector<Shape>& in) {
  if (n.layer == "seq_attention") {
    if (in.size() != 2 || in[0].size() != 3 || in[1].size() != 3) {
      fail(n, index,
           "seq_attention reads two sequences, the decoder's [batch, Td, H] and the encoder's "
           "[batch, Te, He], given " +
               std::to_string(in.size()) + " input(s)" +
               (in.empty() ? "" : " of shape " + shape_str(in[0])));
    }
    return std::make_shared<SeqAttention>(in[0][2], in[1][2]);
  }
  if (in.size() != 1) fail(n, index, "lstm reads one input, given " + std::to_string(in.size()));
  if (n.hidden <= 0) fail(n, index, "lstm needs 'hidden' > 0");
  if (in[0].size() != 3) {
    fail(n, index, "lstm reads a sequence [batch, steps, width], given " + shape_str(in[0]));
  }
  return std::make_shared<Lstm>(in[0][2], n.hidden, n.bidirectional);
}

// The layer of node `n` reading tensors of `in` shapes.
std::shared_ptr<const Layer> make_layer(const GraphNode& n, std::size_t index,
                                        const std::vector<Shape>& in) {
  static const std::set<std::string> kKinds = {
      "linear",     "relu",     "gelu",     "layer_norm",     "flatten", "dropout",
      "add",        "concat",   "multiply", "embedding",      "reshape", "conv2d",
      "batch_norm", "max_pool", "avg_pool", "global_avg_pool"};
  if (n.layer == "lstm" || n.layer == "seq_attention") return sequence_layer(n, index, in);
  if (n.layer == "sim") {
    if (n.out <= 0) fail(n, index, "sim needs 'out' > 0 (features per sample)");
    if (n.params < 0) fail(n, index, "sim needs 'params' >= 0");
    for (const Shape& s : in) {
      if (s.empty() || s[0] != in[0][0]) {
        fail(n, index, "sim reads tensors of one batch, given " + shape_str(s));
      }
    }
    return std::make_shared<SimNode>(static_cast<int>(in.size()), n.out, n.params);
  }
  if (!kKinds.contains(n.layer)) {
    fail(n, index,
         "unknown layer '" + n.layer +
             "' (expected linear, relu, gelu, layer_norm, dropout, flatten, add, concat, "
             "multiply, embedding, reshape, conv2d, batch_norm, max_pool, avg_pool, "
             "global_avg_pool, lstm, seq_attention or sim)");
  }
  const bool merge = n.layer == "add" || n.layer == "concat" || n.layer == "multiply";
  if (merge && in.size() < 2) fail(n, index, n.layer + " needs at least two inputs");
  if (!merge && in.size() != 1) {
    fail(n, index, n.layer + " reads one input, given " + std::to_string(in.size()));
  }
  const std::int64_t last = in[0].empty() ? 0 : in[0].back();
  if (n.layer == "linear") {
    if (n.out <= 0) fail(n, index, "linear needs 'out' > 0");
    return std::make_shared<Linear>(last, n.out, activation_of(n, index));
  }
  if (n.layer == "embedding") {
    if (n.vocab <= 0) fail(n, index, "embedding needs 'vocab' > 0");
    if (n.out <= 0) fail(n, index, "embedding needs 'out' > 0 (the width)");
    if (in[0].size() != 2) {
      fail(n, index, "embedding reads token ids [batch, length], given " + shape_str(in[0]));
    }
    // Learned positions for every position of the sequence it reads.
    return std::make_shared<Embedding>(n.vocab, n.out, in[0][1]);
  }
  if (n.layer == "reshape") {
    if (n.shape.empty()) fail(n, index, "reshape needs 'shape' (per sample)");
    for (const std::int64_t d : n.shape) {
      if (d <= 0) fail(n, index, "reshape's shape needs positive dimensions");
    }
    return std::make_shared<Reshape>(n.shape);
  }
  if (image_layer(n.layer)) return make_image_layer(n, index, in[0]);
  if (n.layer == "relu") return std::make_shared<ReLU>();
  if (n.layer == "gelu") return std::make_shared<GELU>();
  if (n.layer == "layer_norm") return std::make_shared<LayerNorm>(last);
  if (n.layer == "flatten") return std::make_shared<Flatten>();
  if (n.layer == "dropout") {
    if (!(n.p >= 0 && n.p < 1)) fail(n, index, "dropout needs 'p' in [0, 1)");
    return std::make_shared<Dropout>(n.p, index);
  }
  if (n.layer == "add") return std::make_shared<AddLayer>(static_cast<int>(in.size()));
  if (n.layer == "multiply") {
    if (in.size() != 2) fail(n, index, "multiply reads exactly two inputs");
    return std::make_shared<MultiplyLayer>();
  }
  if (n.layer == "concat") {
    const auto rank = static_cast<int>(in[0].size());
    const int d = n.axis < 0 ? rank + n.axis : n.axis;
    if (d < 1 || d >= rank) {
      fail(n, index,
           "concat's axis " + std::to_string(n.axis) + " is not a dimension past the batch of " +
               shape_str(in[0]));
    }
    std::vector<std::int64_t> widths;
    for (const Shape& s : in) {
      if (s.size() != in[0].size()) {
        fail(n, index,
             "concat joins inputs of one rank, given " + shape_str(s) + " and " + shape_str(in[0]));
      }
      widths.push_back(s[static_cast<std::size_t>(d)]);
    }
    return std::make_shared<ConcatLayer>(std::move(widths), n.axis);
  }
  throw std::logic_error("graph builder: no rule for layer kind '" + n.layer + "'");
}

// The graph's nodes resolved and checked in order; layer i comes from `layer_for(i, shapes it
// reads)`.
Model link_nodes(const ModelSpec& spec, const std::function<std::shared_ptr<const Layer>(
                                            std::size_t, const std::vector<Shape>&)>& layer_for) {
  const GraphSpec& g = spec.graph;
  if (g.nodes.empty()) throw GraphError(-1, "model graph: has no nodes");
  InputLayout inputs;
  try {
    inputs = InputLayout::of(g);
  } catch (const std::invalid_argument& e) {
    throw GraphError(-1, std::string("model graph: ") + e.what());
  }
  std::map<std::string, int> index;  // name -> layer (Model::kModelInput for an input)
  for (const InputColumns& c : inputs.inputs()) index[c.name] = Model::kModelInput;
  // What a node reading an input gets: the input itself, or its columns of the packed one.
  auto input_of = [&](const std::string& name) {
    const InputColumns& c = *inputs.find(name);
    Shape shape{1};
    shape.insert(shape.end(), c.shape.begin(), c.shape.end());
    return std::make_pair(shape, inputs.packed() ? std::optional<InputColumns>(c) : std::nullopt);
  };
  std::vector<Shape> shapes;  // per node, for a batch of 1
  Layers layers;
  std::vector<std::vector<int>> sources;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const GraphNode& n = g.nodes[i];
    if (n.name.empty()) fail(n, i, "has no name");
    std::vector<int> src;
    std::vector<std::string> read;  // the input read by each source, "" for a layer
    if (n.inputs.empty()) {
      src.push_back(static_cast<int>(i) - 1);
      read.push_back(i == 0 ? inputs.inputs().front().name : "");
      if (i == 0 && inputs.packed()) {
        fail(n, i, "names no input, and the model has several (" + inputs.describe() + ")");
      }
    } else {
      for (const std::string& in : n.inputs) {
        const auto it = index.find(in);
        if (it == index.end()) {
          const bool later =
              std::any_of(g.nodes.begin() + static_cast<std::ptrdiff_t>(i), g.nodes.end(),
                          [&](const GraphNode& m) { return m.name == in; });
          fail(n, i,
               later ? "reads '" + in + "', which is not earlier (the graph must be in order; " +
                           "an edge back would be a cycle)"
                     : "reads '" + in + "', which is neither an earlier node nor " +
                           (inputs.packed() ? "an input (" + inputs.describe() + ")"
                                            : "the input '" + inputs.inputs()[0].name + "'"));
        }
        src.push_back(it->second);
        read.push_back(it->second == Model::kModelInput ? in : "");
      }
    }
    if (index.contains(n.name)) fail(n, i, "the name is used twice");
    std::vector<Shape> in;
    std::vector<std::optional<InputColumns>> views;
    bool any_view = false;
    for (std::size_t k = 0; k < src.size(); ++k) {
      if (src[k] != Model::kModelInput) {
        in.push_back(shapes[static_cast<std::size_t>(src[k])]);
        views.emplace_back();
        continue;
      }
      auto [shape, view] = input_of(read[k]);
      // Token ids are i32; an f32 input would be cast, and its fractions silently dropped.
      if (n.layer == "embedding" && inputs.find(read[k])->dtype != DType::i32) {
        fail(n, i,
             "embedding reads i32 token ids, but input '" + read[k] + "' is " +
                 std::string(dtype_name(inputs.find(read[k])->dtype)));
      }
      in.push_back(shape);
      any_view = any_view || view.has_value();
      views.push_back(std::move(view));
    }
    std::shared_ptr<const Layer> layer = layer_for(i, in);
    if (layer == nullptr) fail(n, i, "has no layer");
    if (layer->arity() != static_cast<int>(in.size())) {
      fail(n, i,
           layer->describe() + " reads " + std::to_string(layer->arity()) +
               (layer->arity() == 1 ? " tensor" : " tensors") + ", given " +
               std::to_string(in.size()));
    }
    try {
      shapes.push_back(layer->output_shape_n(in));
    } catch (const std::invalid_argument& e) {
      fail(n, i, e.what());
    }
    if (any_view) layer = std::make_shared<InputView>(std::move(layer), std::move(views));
    layers.push_back(std::move(layer));
    sources.push_back(std::move(src));
    index[n.name] = static_cast<int>(i);
  }
  // Model names the layer whose output nothing reads; the node is what the user wrote.
  for (std::size_t i = 0; i + 1 < g.nodes.size(); ++i) {
    const int me = static_cast<int>(i);
    const bool read = std::any_of(sources.begin(), sources.end(), [&](const std::vector<int>& s) {
      return std::find(s.begin(), s.end(), me) != s.end();
    });
    if (!read) fail(g.nodes[i], i, "its output is never read (only the last node's may be)");
  }
  return Model(spec, std::move(layers), std::move(sources));
}

}  // namespace

Model build_graph(const ModelSpec& spec) {
  return link_nodes(spec, [&](std::size_t i, const std::vector<Shape>& in) {
    return make_layer(spec.graph.nodes[i], i, in);
  });
}

Model assemble_graph(const ModelSpec& spec, std::vector<std::shared_ptr<const Layer>> layers) {
  if (layers.size() != spec.graph.nodes.size()) {
    throw GraphError(-1, "model graph: " + std::to_string(layers.size()) + " layers for " +
                             std::to_string(spec.graph.nodes.size()) + " nodes");
  }
  return link_nodes(spec, [&](std::size_t i, const std::vector<Shape>&) { return layers[i]; });
}

}  // namespace tandem::models
