#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/graph_spec.hpp"

namespace tandem::models::zoo {

// Writes a zoo model's graph node by node: each call appends one node reading the given tensors
// (by name; the model input is "image" or the names the graph declares) and returns its name, so
// that a builder reads like the network's definition.
class GraphWriter {
 public:
  explicit GraphWriter(GraphSpec& graph) : graph_(graph) {}

  // conv2d with a kh x kw window (PyTorch's (kh, kw) kernel and (ph, pw) padding).
  std::string conv(const std::string& in, std::int64_t out, std::int64_t kh, std::int64_t kw,
                   std::int64_t stride, std::int64_t ph, std::int64_t pw);
  std::string conv(const std::string& in, std::int64_t out, std::int64_t k, std::int64_t stride,
                   std::int64_t pad) {
    return conv(in, out, k, k, stride, pad, pad);
  }
  std::string batch_norm(const std::string& in);
  std::string relu(const std::string& in);
  // conv, batch norm, relu: the unit ResNet and Inception are built of.
  std::string conv_bn_relu(const std::string& in, std::int64_t out, std::int64_t kh,
                           std::int64_t kw, std::int64_t stride, std::int64_t ph, std::int64_t pw);
  std::string conv_bn_relu(const std::string& in, std::int64_t out, std::int64_t k,
                           std::int64_t stride, std::int64_t pad) {
    return conv_bn_relu(in, out, k, k, stride, pad, pad);
  }
  std::string max_pool(const std::string& in, std::int64_t kernel, std::int64_t stride,
                       std::int64_t pad);
  std::string avg_pool(const std::string& in, std::int64_t kernel, std::int64_t stride,
                       std::int64_t pad);
  std::string global_avg_pool(const std::string& in);
  std::string add(const std::vector<std::string>& in);
  // Joined along the channels.
  std::string concat_channels(const std::vector<std::string>& in);
  std::string dropout(const std::string& in, float p);
  std::string linear(const std::string& in, std::int64_t out);
  // Token ids [batch, length] -> [batch, length, out] (with learned positions).
  std::string embedding(const std::string& in, std::int64_t vocab, std::int64_t out);
  std::string lstm(const std::string& in, std::int64_t hidden, bool bidirectional = false);
  // Decoder states `q` attending over encoder outputs `e`: concat(q, context).
  std::string seq_attention(const std::string& q, const std::string& e);
  // Joined along `axis` (-1: the last dimension; 1: the time of a sequence).
  std::string concat(const std::vector<std::string>& in, int axis);

 private:
  std::string append(GraphNode node);

  GraphSpec& graph_;
};

}  // namespace tandem::models::zoo
