// The sequence layers in a config's graph: `lstm` (hidden, bidirectional) and `seq_attention`
// nodes are read, built, and every bad one is refused at the file and line of its node.
#include <gtest/gtest.h>

#include <string>

#include "config_errors.hpp"
#include "models/model.hpp"
#include "train/config.hpp"

namespace tandem::apps {
namespace {

// Line 6 is node 0; node i is on line 6 + i.
const char* kGnmt = R"(model:
  inputs:
    - {name: src, shape: [6], dtype: i32}
    - {name: tgt, shape: [6], dtype: i32}
  graph:
    - {name: es, layer: embedding, vocab: 10, out: 8, inputs: [src]}
    - {name: enc, layer: lstm, hidden: 5, bidirectional: true}
    - {name: et, layer: embedding, vocab: 10, out: 8, inputs: [tgt]}
    - {name: dec, layer: lstm, hidden: 7}
    - {name: att, layer: seq_attention, inputs: [dec, enc]}
    - {name: logits, layer: linear, out: 10}
data: {kind: sequence-pairs, samples: 64, seed: 1, vocab: 10}
train: {minibatch: 8, steps: 2, seed: 1, optimizer: {kind: sgd, lr: 0.1}}
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  return testing::replace_once(std::move(text), from, to);
}

void expect_error(const std::string& text, int line, std::initializer_list<std::string> words) {
  testing::expect_config_error(text, "s.yaml", line, 0, words);
}

TEST(ConfigSequence, ParsesLstmAndAttentionNodes) {
  const train::Config c = train::parse_config(kGnmt, "s.yaml");
  ASSERT_EQ(c.model.graph.nodes.size(), 6u);
  EXPECT_EQ(c.model.graph.nodes[1].hidden, 5);
  EXPECT_TRUE(c.model.graph.nodes[1].bidirectional);
  EXPECT_EQ(c.model.graph.nodes[3].hidden, 7);
  EXPECT_FALSE(c.model.graph.nodes[3].bidirectional);
  const models::Model m = models::Model::build(c.model);
  EXPECT_EQ(m.layer(1).describe(), "bilstm(8->5)");
  EXPECT_EQ(m.layer(4).kind(), "seq_attention");
  EXPECT_EQ(m.sources(4), (std::vector<int>{3, 1}));
  const std::vector<Shape> shapes = m.activation_shapes(2);
  EXPECT_EQ(shapes[1], (Shape{2, 6, 10}));
  EXPECT_EQ(shapes[4], (Shape{2, 6, 7 + 10}));
  EXPECT_EQ(shapes[5], (Shape{2, 6, 10}));
}

TEST(ConfigSequence, BadLstmNodesPointAtTheNode) {
  const std::string enc = "{name: enc, layer: lstm, hidden: 5, bidirectional: true}";
  expect_error(replace(kGnmt, enc, "{name: enc, layer: lstm}"), 7, {"model.graph[1]", "hidden"});
  for (const char* bad : {"0", "-3", "99999999999", "abc", "2.5", "[5]", ".nan"}) {
    SCOPED_TRACE(bad);
    expect_error(replace(kGnmt, "hidden: 5", std::string("hidden: ") + bad), 7,
                 {"model.graph[1].hidden"});
  }
  for (const char* bad : {"3", "[true]", "{a: 1}", "maybe"}) {
    SCOPED_TRACE(bad);
    expect_error(replace(kGnmt, "bidirectional: true", std::string("bidirectional: ") + bad), 7,
                 {"model.graph[1].bidirectional"});
  }
  expect_error(replace(kGnmt, "hidden: 7}", "hidden: 7, out: 4}"), 9,
               {"model.graph[3].out", "unknown key"});
  // An LSTM reads a sequence of vectors, not token ids.
  expect_error(replace(kGnmt, "bidirectional: true}", "bidirectional: true, inputs: [src]}"), 7,
               {"model.graph[1]", "lstm reads a sequence", "[1, 6]"});
  // `bidirectional` belongs to lstm only.
  expect_error(replace(kGnmt, "out: 10}", "out: 10, bidirectional: true}"), 11,
               {"model.graph[5].bidirectional", "unknown key"});
}

TEST(ConfigSequence, BadAttentionNodesPointAtTheNode) {
  expect_error(replace(kGnmt, "inputs: [dec, enc]", "inputs: [dec]"), 10,
               {"model.graph[4]", "seq_attention reads two sequences", "1 input"});
  expect_error(replace(kGnmt, "inputs: [dec, enc]", "inputs: [dec, enc, et]"), 10,
               {"model.graph[4]", "seq_attention reads two sequences", "3 input"});
  expect_error(replace(kGnmt, "inputs: [dec, enc]", "inputs: [dec, src]"), 10,
               {"model.graph[4]", "seq_attention reads two sequences"});
  expect_error(replace(kGnmt, "inputs: [dec, enc]}", "inputs: [dec, enc], hidden: 3}"), 10,
               {"model.graph[4].hidden", "unknown key"});
  expect_error(replace(kGnmt, "layer: seq_attention", "layer: seq_attn"), 10,
               {"unknown layer 'seq_attn'", "seq_attention"});
}

}  // namespace
}  // namespace tandem::apps

namespace tandem::apps {
namespace {

// The zoo's sequence models and the video-captions data: every bad size is refused at its line.
const char* kS2vt =
    R"(model: {name: s2vt, d_model: 8, vocab: 6, seq_len: 3, frames: 4, frame_features: 5}
data: {kind: video-captions, samples: 64, noise: 0.1}
train: {minibatch: 8, steps: 2, seed: 1, optimizer: {kind: sgd, lr: 0.1}}
)";

TEST(ConfigSequenceZoo, ReadsGnmtAndS2vtAndRefusesBadSizesAtTheirLines) {
  const train::Config c = train::parse_config(kS2vt, "s.yaml");
  EXPECT_EQ(c.model.frames, 4);
  EXPECT_EQ(c.model.frame_features, 5);
  EXPECT_EQ(models::Model::build(c.model).input_dtype(), DType::f32);
  auto error = [](const std::string& from, const std::string& to, int line,
                  std::initializer_list<std::string> words) {
    testing::expect_config_error(testing::replace_once(kS2vt, from, to), "s.yaml", line, 0, words);
  };
  error("noise: 0.1", "noise: -1", 2, {"data.noise"});
  error("noise: 0.1", "noise: 0.1, frames: 9", 2,
        {"data.frames", "must equal the model's frames 4"});
  error("noise: 0.1", "noise: 0.1, vocab: 7", 2, {"data.vocab", "[2, 6]"});
  error("noise: 0.1", "noise: 0.1, words: 99999999999", 2, {"data.words"});
  error("frames: 4", "frames: 2", 2, {"data.frames", "at least the caption's 3 words"});
  error("frame_features: 5", "frame_features: 0", 1, {"model.frame_features"});
  const std::string gnmt =
      "model: {name: gnmt, layers: 8, d_model: 16, vocab: 10, seq_len: 5}\n"
      "data: {kind: sequence-pairs, samples: 64}\n"
      "train: {minibatch: 8, steps: 2, seed: 1, optimizer: {kind: sgd, lr: 0.1}}\n";
  const train::Config g = train::parse_config(gnmt, "g.yaml");
  EXPECT_EQ(g.model.layers, 8);
  for (const char* bad : {"layers: 7", "layers: 2", "layers: 2048"}) {
    SCOPED_TRACE(bad);
    testing::expect_config_error(testing::replace_once(gnmt, "layers: 8", bad), "g.yaml", 1, 0,
                                 {"model.layers", "even"});
  }
  testing::expect_config_error(testing::replace_once(gnmt, "d_model: 16", "d_model: 15"), "g.yaml",
                               1, 0, {"model.d_model", "even"});
  testing::expect_config_error(testing::replace_once(gnmt, "sequence-pairs", "video-captions"),
                               "g.yaml", 2, 0, {"data.kind", "does not fit model 'gnmt'"});
}

}  // namespace
}  // namespace tandem::apps
