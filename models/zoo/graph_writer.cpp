#include "models/zoo/graph_writer.hpp"

#include <utility>

namespace tandem::models::zoo {
namespace {

GraphNode node(std::string layer, std::vector<std::string> inputs) {
  GraphNode n;
  n.layer = std::move(layer);
  n.inputs = std::move(inputs);
  return n;
}

}  // namespace

std::string GraphWriter::append(GraphNode n) {
  // Names carry the node's index: unique, and an error about node 57 names "57_conv2d".
  n.name = std::to_string(graph_.nodes.size()) + "_" + n.layer;
  graph_.nodes.push_back(n);
  return n.name;
}

std::string GraphWriter::conv(const std::string& in, std::int64_t out, std::int64_t kh,
                              std::int64_t kw, std::int64_t stride, std::int64_t ph,
                              std::int64_t pw) {
  GraphNode n = node("conv2d", {in});
  n.out = out;
  n.kernel = kh;
  n.kernel_w = kw;
  n.stride = stride;
  n.pad = ph;
  n.pad_w = pw;
  return append(std::move(n));
}

std::string GraphWriter::batch_norm(const std::string& in) {
  return append(node("batch_norm", {in}));
}

std::string GraphWriter::relu(const std::string& in) {
  return append(node("relu", {in}));
}

std::string GraphWriter::conv_bn_relu(const std::string& in, std::int64_t out, std::int64_t kh,
                                      std::int64_t kw, std::int64_t stride, std::int64_t ph,
                                      std::int64_t pw) {
  return relu(batch_norm(conv(in, out, kh, kw, stride, ph, pw)));
}

std::string GraphWriter::max_pool(const std::string& in, std::int64_t kernel, std::int64_t stride,
                                  std::int64_t pad) {
  GraphNode n = node("max_pool", {in});
  n.kernel = kernel;
  n.stride = stride;
  n.pad = pad;
  return append(std::move(n));
}

std::string GraphWriter::avg_pool(const std::string& in, std::int64_t kernel, std::int64_t stride,
                                  std::int64_t pad) {
  GraphNode n = node("avg_pool", {in});
  n.kernel = kernel;
  n.stride = stride;
  n.pad = pad;
  return append(std::move(n));
}

std::string GraphWriter::global_avg_pool(const std::string& in) {
  return append(node("global_avg_pool", {in}));
}

std::string GraphWriter::add(const std::vector<std::string>& in) {
  return append(node("add", in));
}

std::string GraphWriter::concat_channels(const std::vector<std::string>& in) {
  GraphNode n = node("concat", in);
  n.axis = 1;
  return append(std::move(n));
}

std::string GraphWriter::dropout(const std::string& in, float p) {
  GraphNode n = node("dropout", {in});
  n.p = p;
  return append(std::move(n));
}

std::string GraphWriter::linear(const std::string& in, std::int64_t out) {
  GraphNode n = node("linear", {in});
  n.out = out;
  return append(std::move(n));
}

std::string GraphWriter::embedding(const std::string& in, std::int64_t vocab, std::int64_t out) {
  GraphNode n = node("embedding", {in});
  n.vocab = vocab;
  n.out = out;
  return append(std::move(n));
}

std::string GraphWriter::lstm(const std::string& in, std::int64_t hidden, bool bidirectional) {
  GraphNode n = node("lstm", {in});
  n.hidden = hidden;
  n.bidirectional = bidirectional;
  return append(std::move(n));
}

std::string GraphWriter::seq_attention(const std::string& q, const std::string& e) {
  return append(node("seq_attention", {q, e}));
}

std::string GraphWriter::concat(const std::vector<std::string>& in, int axis) {
  GraphNode n = node("concat", in);
  n.axis = axis;
  return append(std::move(n));
}

}  // namespace tandem::models::zoo
