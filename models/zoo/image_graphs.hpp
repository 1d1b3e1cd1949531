#pragma once

#include "models/graph_spec.hpp"
#include "models/model_spec.hpp"

namespace tandem::models::zoo {

// The seed paper's image networks as graphs (torchvision's definitions), sized by the spec's
// width_mult, in_channels, image_size and classes. Every convolution is followed by batch
// normalisation and keeps its bias (the graph's conv2d always has one; torchvision's have
// none, so the parameter count is torchvision's plus one bias per conv channel). Throws
// std::invalid_argument naming the field that is out of range.

// ResNet-50 (v1.5: the stride on the 3x3 convolution): a 7x7 stem, bottleneck blocks
// [3, 4, 6, 3] with residual adds (a projection where the shape changes), global average pool,
// a linear head. image_size at least 32.
GraphSpec resnet50_graph(const ModelSpec& spec);

// Inception-v3 without its auxiliary head: the stem, Mixed 5b-5d (A), 6a (B), 6b-6e (C, the
// factorised 1x7 / 7x1 convolutions), 7a (D), 7b-7c (E), global average pool, dropout
// (spec.dropout), a linear head. Branches join along the channels. image_size at least 75.
GraphSpec inception_v3_graph(const ModelSpec& spec);

}  // namespace tandem::models::zoo
