#include <stdexcept>
#include <string>

#include "models/zoo/graph_writer.hpp"
#include "models/zoo/sequence_graphs.hpp"

namespace tandem::models::zoo {

GraphSpec gnmt_graph(const ModelSpec& spec) {
  auto require = [&](bool ok, const std::string& field, const std::string& why) {
    if (!ok) throw std::invalid_argument("model spec gnmt: field '" + field + "' " + why);
  };
  require(spec.layers >= 4 && spec.layers % 2 == 0, "layers",
          "must be even and at least 4 (half encoder, half decoder; 8 or 16 in the paper), got " +
              std::to_string(spec.layers));
  require(spec.d_model >= 2 && spec.d_model % 2 == 0, "d_model",
          "must be even and positive (the bidirectional first layer has d_model / 2 per "
          "direction), got " +
              std::to_string(spec.d_model));
  require(spec.vocab >= 2, "vocab", "must be at least 2");
  require(spec.seq_len > 0, "seq_len", "must be positive");
  require(spec.dropout >= 0 && spec.dropout < 1, "dropout", "must be in [0, 1)");
  const std::int64_t half = spec.layers / 2, width = spec.d_model;
  auto dropout = [&](GraphWriter& w, const std::string& in) {
    return spec.dropout > 0 ? w.dropout(in, spec.dropout) : in;
  };
  GraphSpec g;
  g.inputs = {{"source", {spec.seq_len}, "i32"}, {"target", {spec.seq_len}, "i32"}};
  GraphWriter w(g);

  // Encoder: bidirectional, then unidirectional layers, residual from the third on.
  std::string x = dropout(w, w.embedding("source", spec.vocab, width));
  x = w.lstm(x, width / 2, /*bidirectional=*/true);
  for (std::int64_t layer = 2; layer <= half; ++layer) {
    const std::string y = w.lstm(x, width);
    x = layer >= 3 ? w.add({y, x}) : y;
  }
  const std::string encoded = x;

  // Decoder: the first layer's states attend over the encoder; the attention output reaches
  // every later layer.
  x = w.lstm(dropout(w, w.embedding("target", spec.vocab, width)), width);
  const std::string attention = w.seq_attention(x, encoded);
  x = w.lstm(attention, width);
  for (std::int64_t layer = 3; layer <= half; ++layer) {
    const std::string y = w.lstm(w.concat({x, attention}, -1), width);
    x = w.add({y, x});
  }
  w.linear(dropout(w, x), spec.vocab);
  return g;
}

}  // namespace tandem::models::zoo
