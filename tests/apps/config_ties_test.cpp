// Tied parameters in a config: `tie_embeddings` for a gpt, `tie` (one list of names or a list of
// lists) for any model, node names in a graph, and every bad tie refused at the file, line and
// column of the name at fault.
#include <gtest/gtest.h>

#include <string>

#include "config_errors.hpp"
#include "models/model.hpp"
#include "train/config.hpp"

namespace tandem::apps {
namespace {

// gpt of 2 blocks: layer 0 the embedding ("0.tokens" [24, 16]), 1-2 the blocks, 3 the final
// LayerNorm, 4 the head ("4.weight" [24, 16], "4.bias" [24]). The model section is lines 1-2.
const char* kGpt = R"(model:
  {name: gpt, layers: 2, d_model: 16, heads: 2, seq_len: 8, vocab: 24}
data: {kind: markov-text, vocab: 24, samples: 64, seed: 1}
train: {minibatch: 4, steps: 2, seed: 1, optimizer: {kind: adamw, lr: 1.0e-3}}
)";

// a and b read the input: linear layers of one shape (layers 0 and 1), out is [4, 8].
const char* kGraph = R"(model:
  input: {name: x, shape: [6]}
  graph:
    - {name: a, layer: linear, out: 8}
    - {name: b, layer: linear, out: 8, inputs: [x]}
    - {name: s, layer: add, inputs: [a, b]}
    - {name: out, layer: linear, out: 4}
  tie: TIE
data: {kind: teacher, samples: 64, seed: 3}
train: {minibatch: 8, steps: 2, seed: 1, optimizer: {kind: sgd, lr: 0.1}}
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  return testing::replace_once(std::move(text), from, to);
}

std::string graph(const std::string& tie) {
  return replace(kGraph, "TIE", tie);
}

std::string gpt(const std::string& extra) {
  return replace(kGpt, "vocab: 24}", "vocab: 24" + extra + "}");
}

void expect_error(const std::string& text, int line, int column,
                  std::initializer_list<std::string> words) {
  testing::expect_config_error(text, "t.yaml", line, column, words);
}

TEST(ConfigTies, GptTiesItsEmbeddings) {
  const train::Config c = train::parse_config(gpt(", tie_embeddings: true"), "t.yaml");
  EXPECT_TRUE(c.model.tie_embeddings);
  const models::Model m = models::Model::build(c.model);
  ASSERT_EQ(m.ties().size(), 1u);
  EXPECT_EQ(m.ties()[0].describe(), "0.tokens=4.weight");
  EXPECT_NE(c.model.describe().find("tie_embeddings"), std::string::npos);
  // Off by default, and the description of an untied model is what it always was.
  const train::Config plain = train::parse_config(gpt(""), "t.yaml");
  EXPECT_FALSE(plain.model.tie_embeddings);
  EXPECT_EQ(plain.model.describe().find("tie"), std::string::npos);
}

TEST(ConfigTies, OneListOrAListOfListsByIndexOrNodeName) {
  const train::Config one = train::parse_config(graph("[a.weight, b.weight]"), "t.yaml");
  EXPECT_EQ(one.model.ties, (std::vector<std::vector<std::string>>{{"0.weight", "1.weight"}}));
  const train::Config both =
      train::parse_config(graph("[[a.weight, 1.weight], [0.bias, b.bias]]"), "t.yaml");
  EXPECT_EQ(both.model.ties, (std::vector<std::vector<std::string>>{{"0.weight", "1.weight"},
                                                                    {"0.bias", "1.bias"}}));
  const models::Model m = models::Model::build(both.model);
  ASSERT_EQ(m.ties().size(), 2u);
  EXPECT_EQ(m.ties()[1].describe(), "0.bias=1.bias");
  EXPECT_NE(both.model.describe().find("tie=0.weight=1.weight, tie=0.bias=1.bias"),
            std::string::npos)
      << both.model.describe();
}

TEST(ConfigTies, BadTiesPointAtTheName) {
  // Line 8 holds the tie; "  tie: " is 7 columns, so the list opens at column 8.
  expect_error(graph("[a.weight, c.weight]"), 8, 19, {"model.tie[1]", "no parameter 'c.weight'"});
  expect_error(graph("[a.weight, s.weight]"), 8, 19,
               {"no parameter 's.weight' ('2.weight')", "layer 2 has no parameters"});
  expect_error(graph("[a.weight, out.wieght]"), 8, 19,
               {"'out.wieght' ('3.wieght')", "layer 3's are weight, bias"});
  expect_error(graph("[a.weight, 9.weight]"), 8, 19, {"no parameter '9.weight'", "layers 0 to 3"});
  expect_error(graph("[a.weight, out.weight]"), 8, 19,
               {"'out.weight' has shape [4, 8], but 'a.weight' has [8, 6]", "share one shape"});
  expect_error(graph("[a.weight, a.weight]"), 8, 19, {"'a.weight' is already tied in this tie"});
  expect_error(graph("[[a.weight, b.weight], [0.weight, b.bias]]"), 8, 32,
               {"model.tie[1][0]", "'0.weight' is already tied in tie 0 (as 'a.weight')"});
  expect_error(graph("[a.weight]"), 8, 8, {"a tie names at least two parameters"});
  expect_error(graph("[]"), 8, 0, {"expected a list of parameter names"});
  expect_error(graph("a.weight"), 8, 8, {"expected a list of parameter names"});
  expect_error(graph("[[a.weight, b.weight], a.bias]"), 8, 31,
               {"model.tie[1]", "lists of names only"});
  expect_error(graph("[a.weight, [b.weight]]"), 8, 19, {"expected a parameter name"});
  expect_error(graph("[a.weight, {b: weight}]"), 8, 19, {"expected a parameter name"});
  // tie_embeddings holds the token embedding and the head's weight already.
  expect_error(gpt(", tie_embeddings: true, tie: [4.weight, 0.tokens]"), 2, 0,
               {"'4.weight' is already tied by tie_embeddings"});
  expect_error(gpt(", tie: [0.tokens, 4.bias]"), 2, 0, {"'4.bias' has shape [24]"});
}

TEST(ConfigTies, TieEmbeddingsIsAGptsOnly) {
  expect_error(replace(graph("[a.weight, b.weight]"), "  tie: ", "  tie_embeddings: true\n  tie: "),
               8, 0, {"model.tie_embeddings", "only a gpt"});
  expect_error(gpt(", tie_embeddings: yes please"), 2, 0, {"expected true or false"});
}

}  // namespace
}  // namespace tandem::apps
