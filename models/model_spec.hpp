#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/graph_spec.hpp"

namespace tandem::models {

// What to build: Model::build(spec). Fields not used by a model's `name` are ignored.
struct ModelSpec {
  // "mlp" | "gpt" | "vgg16" | "alexnet" | "resnet50" | "inception_v3" | "gnmt" | "s2vt" |
  // "graph"
  std::string name = "mlp";

  // mlp: in_features, hidden..., classes (at least two entries). Hidden layers are
  // Linear+ReLU, the last Linear gives the logits.
  std::vector<std::int64_t> widths;

  // gpt: decoder-only transformer. Layers: embedding (tokens + learned positions),
  // `layers` transformer blocks, final LayerNorm, Linear head to `vocab` logits.
  std::int64_t layers = 0;
  std::int64_t d_model = 0;
  std::int64_t heads = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab = 0;
  std::int64_t d_ff = 0;  // 0: 4 * d_model
  // The output head reuses the token embedding (a tie of "0.tokens" and the head's weight).
  bool tie_embeddings = false;

  // vgg16: channels are VGG-16's (64..512) times width_mult, at least 1; image_size must be
  // a multiple of 32 (five 2x2 max-pools). The classifier's hidden width is 4096 * width_mult.
  // alexnet, resnet50, inception_v3: the same fields (every channel count times width_mult);
  // image_size at least 63, 32 and 75. is_image_model lists the models that read [batch,
  // in_channels, image_size, image_size] images.
  double width_mult = 1.0;
  std::int64_t in_channels = 3;
  std::int64_t image_size = 224;
  std::int64_t classes = 10;

  // gnmt, s2vt (models/zoo/sequence_graphs.hpp): d_model is the LSTMs' width, vocab the tokens
  // (0 the decoder's start token), seq_len the decoder's steps; dropout as below.
  //   gnmt: `layers` LSTM layers in all, half encoder and half decoder (even, >= 4; the paper's
  //   8 or 16); seq_len is the source's length too.
  //   s2vt: seq_len caption words after `frames` video frames of `frame_features` features each.
  std::int64_t frames = 0;
  std::int64_t frame_features = 0;

  // graph: the layers and their edges (models/graph_spec.hpp). The zoo's graph models (resnet50,
  // inception_v3, gnmt, s2vt) have theirs written here by Model::build.
  GraphSpec graph;

  // Parameters shared by several layers (models/tied_params.hpp): each entry names the copies,
  // "<layer index>.<parameter>" ("0.tokens", "13.weight").
  std::vector<std::vector<std::string>> ties;

  // Dropout probability (gpt: embedding, attention output and MLP output; vgg16: classifier;
  // mlp: none). 0 disables it.
  float dropout = 0.0f;

  // The loss of the last layer's output (models/loss.hpp): "cross_entropy" (i32 class ids),
  // "mse" or "bce_with_logits" (f32 targets of the output's shape).
  std::string loss = "cross_entropy";

  std::string describe() const;  // one line, e.g. "gpt(layers=14, d_model=256, ...)"
};

// Whether the zoo model `name` reads square images sized by ModelSpec's image fields.
bool is_image_model(const std::string& name);
// Whether the zoo model `name` is a sequence graph reading named inputs (gnmt, s2vt): its
// inputs are those of the graph Model::build writes.
bool is_sequence_model(const std::string& name);

// Presets used by tests, benchmarks and configs.
ModelSpec mlp_spec(std::vector<std::int64_t> widths);
ModelSpec gpt_spec(std::int64_t layers, std::int64_t d_model, std::int64_t heads,
                   std::int64_t seq_len, std::int64_t vocab);
// VGG-16 with width_mult 1/8 on 32x32 images: trains on a CPU.
ModelSpec vgg16_small_spec(std::int64_t classes = 10);

}  // namespace tandem::models
