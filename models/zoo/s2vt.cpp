#include <stdexcept>
#include <string>

#include "models/zoo/graph_writer.hpp"
#include "models/zoo/sequence_graphs.hpp"

namespace tandem::models::zoo {

GraphSpec s2vt_graph(const ModelSpec& spec) {
  auto require = [&](bool ok, const std::string& field, const std::string& why) {
    if (!ok) throw std::invalid_argument("model spec s2vt: field '" + field + "' " + why);
  };
  require(spec.d_model > 0, "d_model", "must be positive");
  require(spec.vocab >= 2, "vocab", "must be at least 2 (token 0 is <pad>)");
  require(spec.seq_len > 0, "seq_len", "must be positive (caption words)");
  require(spec.frames > 0, "frames", "must be positive");
  require(spec.frame_features > 0, "frame_features", "must be positive");
  require(spec.dropout >= 0 && spec.dropout < 1, "dropout", "must be in [0, 1)");
  auto dropout = [&](GraphWriter& w, const std::string& in) {
    return spec.dropout > 0 ? w.dropout(in, spec.dropout) : in;
  };
  GraphSpec g;
  g.inputs = {{"frames", {spec.frames, spec.frame_features}, "f32"},
              {"caption", {spec.seq_len}, "i32"}};
  GraphWriter w(g);
  const std::string frames = w.lstm(dropout(w, w.linear("frames", spec.d_model)), spec.d_model);
  const std::string words = dropout(w, w.embedding("caption", spec.vocab, spec.d_model));
  // One sequence over time: the frames' states, then the words.
  const std::string steps = w.lstm(w.concat({frames, words}, 1), spec.d_model);
  w.linear(dropout(w, steps), spec.vocab);
  return g;
}

}  // namespace tandem::models::zoo
