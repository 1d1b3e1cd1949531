// Model::build: the model zoo (mlp, gpt, vgg16, alexnet as flat layer lists; resnet50,
// inception_v3, gnmt and s2vt as graphs, models/zoo/).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "models/graph_builder.hpp"
#include "models/layers/activation.hpp"
#include "models/layers/conv2d.hpp"
#include "models/layers/dropout.hpp"
#include "models/layers/embedding.hpp"
#include "models/layers/flatten.hpp"
#include "models/layers/layer_norm.hpp"
#include "models/layers/linear.hpp"
#include "models/layers/max_pool2d.hpp"
#include "models/layers/transformer_block.hpp"
#include "models/model.hpp"
#include "models/zoo/image_graphs.hpp"
#include "models/zoo/sequence_graphs.hpp"

namespace tandem::models {
namespace {

using Layers = std::vector<std::shared_ptr<const Layer>>;

void require(bool ok, const ModelSpec& spec, const std::string& field, const std::string& why) {
  if (!ok) {
    throw std::invalid_argument("model spec " + spec.name + ": field '" + field + "' " + why);
  }
}

Layers build_mlp(const ModelSpec& spec) {
  require(spec.widths.size() >= 2, spec, "widths", "needs at least input and output widths");
  for (const std::int64_t w : spec.widths) require(w > 0, spec, "widths", "must be positive");
  Layers layers;
  for (std::size_t i = 0; i + 1 < spec.widths.size(); ++i) {
    const bool last = i + 2 == spec.widths.size();
    layers.push_back(std::make_shared<Linear>(
        spec.widths[i], spec.widths[i + 1], last ? cpu::Activation::none : cpu::Activation::relu));
  }
  return layers;
}

Layers build_gpt(const ModelSpec& spec) {
  require(spec.layers > 0, spec, "layers", "must be positive");
  require(spec.d_model > 0, spec, "d_model", "must be positive");
  require(spec.heads > 0 && spec.d_model % spec.heads == 0, spec, "heads",
          "must be positive and divide d_model");
  require(spec.seq_len > 0, spec, "seq_len", "must be positive");
  require(spec.vocab > 0, spec, "vocab", "must be positive");
  require(spec.d_ff >= 0, spec, "d_ff", "must be >= 0");
  require(spec.dropout >= 0 && spec.dropout < 1, spec, "dropout", "must be in [0, 1)");
  const std::int64_t d_ff = spec.d_ff > 0 ? spec.d_ff : 4 * spec.d_model;
  Layers layers;
  layers.push_back(std::make_shared<Embedding>(spec.vocab, spec.d_model, spec.seq_len));
  if (spec.dropout > 0) layers.push_back(std::make_shared<Dropout>(spec.dropout, layers.size()));
  for (std::int64_t i = 0; i < spec.layers; ++i) {
    layers.push_back(std::make_shared<TransformerBlock>(spec.d_model, spec.heads, d_ff,
                                                        spec.dropout, layers.size(), spec.layers));
  }
  layers.push_back(std::make_shared<LayerNorm>(spec.d_model));
  layers.push_back(std::make_shared<Linear>(spec.d_model, spec.vocab));
  return layers;
}

Layers build_vgg16(const ModelSpec& spec) {
  require(spec.width_mult > 0, spec, "width_mult", "must be positive");
  require(spec.in_channels > 0, spec, "in_channels", "must be positive");
  require(spec.image_size >= 32 && spec.image_size % 32 == 0, spec, "image_size",
          "must be a positive multiple of 32 (five 2x2 max-pools)");
  require(spec.classes > 0, spec, "classes", "must be positive");
  require(spec.dropout >= 0 && spec.dropout < 1, spec, "dropout", "must be in [0, 1)");
  auto scaled = [&](double c) {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(c * spec.width_mult)));
  };
  constexpr int kPool = 0;
  const int config[] = {64,    64,  kPool, 128, 128,   kPool, 256, 256, 256,
                        kPool, 512, 512,   512, kPool, 512,   512, 512, kPool};
  Layers layers;
  std::int64_t channels = spec.in_channels;
  for (const int c : config) {
    if (c == kPool) {
      layers.push_back(std::make_shared<MaxPool2d>(2));
    } else {
      layers.push_back(
          std::make_shared<Conv2d>(channels, scaled(c), 3, 1, 1, cpu::Activation::relu));
      channels = scaled(c);
    }
  }
  const std::int64_t side = spec.image_size / 32;
  const std::int64_t hidden = scaled(4096);
  layers.push_back(std::make_shared<Flatten>());
  layers.push_back(std::make_shared<Linear>(channels * side * side, hidden, cpu::Activation::relu));
  if (spec.dropout > 0) layers.push_back(std::make_shared<Dropout>(spec.dropout, layers.size()));
  layers.push_back(std::make_shared<Linear>(hidden, hidden, cpu::Activation::relu));
  if (spec.dropout > 0) layers.push_back(std::make_shared<Dropout>(spec.dropout, layers.size()));
  layers.push_back(std::make_shared<Linear>(hidden, spec.classes));
  return layers;
}

// Krizhevsky et al.'s network in torchvision's widths (64, 192, 384, 256, 256): five
// convolutions, three 3x3 stride-2 max-pools, a classifier of two hidden 4096-wide layers. The
// classifier reads whatever the features give (at 224 pixels 256 x 6 x 6, torchvision's
// shape, so its parameter count is torchvision's), which lets a small image train here.
Layers build_alexnet(const ModelSpec& spec) {
  require(spec.width_mult > 0, spec, "width_mult", "must be positive");
  require(spec.in_channels > 0, spec, "in_channels", "must be positive");
  require(spec.image_size >= 63, spec, "image_size",
          "must be at least 63 (an 11x11 stride-4 convolution and three 3x3 stride-2 pools)");
  require(spec.classes > 0, spec, "classes", "must be positive");
  require(spec.dropout >= 0 && spec.dropout < 1, spec, "dropout", "must be in [0, 1)");
  auto scaled = [&](double c) {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(c * spec.width_mult)));
  };
  using cpu::Activation;
  Layers layers;
  const std::int64_t c1 = scaled(64), c2 = scaled(192), c3 = scaled(384), c4 = scaled(256);
  layers.push_back(std::make_shared<Conv2d>(spec.in_channels, c1, 11, 4, 2, Activation::relu));
  layers.push_back(std::make_shared<MaxPool2d>(3, 2));
  layers.push_back(std::make_shared<Conv2d>(c1, c2, 5, 1, 2, Activation::relu));
  layers.push_back(std::make_shared<MaxPool2d>(3, 2));
  layers.push_back(std::make_shared<Conv2d>(c2, c3, 3, 1, 1, Activation::relu));
  layers.push_back(std::make_shared<Conv2d>(c3, c4, 3, 1, 1, Activation::relu));
  layers.push_back(std::make_shared<Conv2d>(c4, c4, 3, 1, 1, Activation::relu));
  layers.push_back(std::make_shared<MaxPool2d>(3, 2));
  layers.push_back(std::make_shared<Flatten>());
  Shape shape{1, spec.in_channels, spec.image_size, spec.image_size};
  for (const auto& layer : layers) shape = layer->output_shape(shape);
  const std::int64_t hidden = scaled(4096);
  if (spec.dropout > 0) layers.push_back(std::make_shared<Dropout>(spec.dropout, layers.size()));
  layers.push_back(std::make_shared<Linear>(shape[1], hidden, Activation::relu));
  if (spec.dropout > 0) layers.push_back(std::make_shared<Dropout>(spec.dropout, layers.size()));
  layers.push_back(std::make_shared<Linear>(hidden, hidden, Activation::relu));
  layers.push_back(std::make_shared<Linear>(hidden, spec.classes));
  return layers;
}

}  // namespace

Model Model::build(const ModelSpec& spec) {
  if (spec.name == "mlp") return Model(spec, build_mlp(spec));
  if (spec.name == "gpt") {
    Layers layers = build_gpt(spec);
    std::vector<std::vector<std::string>> ties;
    if (spec.tie_embeddings) {
      ties.push_back({"0.tokens", std::to_string(layers.size() - 1) + ".weight"});
    }
    return Model(spec, std::move(layers), {}, std::move(ties));
  }
  if (spec.name == "vgg16") return Model(spec, build_vgg16(spec));
  if (spec.name == "alexnet") return Model(spec, build_alexnet(spec));
  // The graph zoo: a graph written by the zoo, under the zoo's name.
  if (spec.name == "resnet50" || spec.name == "inception_v3") {
    ModelSpec s = spec;
    s.graph = spec.name == "resnet50" ? zoo::resnet50_graph(spec) : zoo::inception_v3_graph(spec);
    return build_graph(s);
  }
  if (is_sequence_model(spec.name)) {
    ModelSpec s = spec;
    s.graph = spec.name == "gnmt" ? zoo::gnmt_graph(spec) : zoo::s2vt_graph(spec);
    return build_graph(s);
  }
  if (spec.name == "graph") return build_graph(spec);
  throw std::invalid_argument(
      "model spec: field 'name' is '" + spec.name +
      "' (expected mlp, gpt, vgg16, alexnet, resnet50, inception_v3, gnmt, s2vt or graph)");
}

}  // namespace tandem::models
