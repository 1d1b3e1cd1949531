// A graph's named inputs in a config (`model: {inputs: [...]}`) and the data kind made for them
// (`sequence-pairs`): each bad declaration is refused with one error at its file, line and
// column, and the dataset's samples pack to what the model reads.
#include <gtest/gtest.h>

#include <string>

#include "config_errors.hpp"
#include "models/data/data_spec.hpp"
#include "models/model.hpp"
#include "train/config.hpp"

namespace tandem::apps {
namespace {

// Lines 3 and 4 are the inputs; node i is on line 6 + i.
const char* kSeq2seq = R"(model:
  inputs:
    - {name: src, shape: [5], dtype: i32}
    - {name: tgt, shape: [5], dtype: i32}
  graph:
    - {name: es, layer: embedding, vocab: 7, out: 4, inputs: [src]}
    - {name: f, layer: flatten}
    - {name: m, layer: linear, out: 20}
    - {name: p, layer: reshape, shape: [5, 4]}
    - {name: et, layer: embedding, vocab: 7, out: 4, inputs: [tgt]}
    - {name: a, layer: add, inputs: [p, et]}
    - {name: out, layer: linear, out: 7}
data: {kind: sequence-pairs, samples: 64, seed: 3}
train: {minibatch: 8, steps: 2, seed: 1, optimizer: {kind: sgd, lr: 0.1}}
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  return testing::replace_once(std::move(text), from, to);
}

void expect_error(const std::string& text, int line, std::initializer_list<std::string> words) {
  testing::expect_config_error(text, "s.yaml", line, 0, words);
}

TEST(ConfigInputs, ParsesNamedInputsAndSequencePairs) {
  const train::Config c = train::parse_config(kSeq2seq, "s.yaml");
  ASSERT_EQ(c.model.graph.inputs.size(), 2u);
  EXPECT_EQ(c.model.graph.inputs[1].name, "tgt");
  EXPECT_EQ(c.model.graph.inputs[1].dtype, "i32");
  const models::Model m = models::Model::build(c.model);
  EXPECT_EQ(m.input_shape(3), (Shape{3, 10}));
  EXPECT_EQ(m.input_dtype(), DType::i32);
  const auto& d = std::get<models::data::SequencePairsData>(c.data);
  EXPECT_EQ(d.spec.length, 5);
  EXPECT_EQ(d.spec.vocab, 7);
  const auto sets = models::data::make_datasets(c.data, 0);
  const std::vector<int64_t> idx{0, 1, 2};
  const auto batch = sets.train->get(idx);
  EXPECT_EQ(batch.inputs.shape(), m.input_shape(3));
  EXPECT_EQ(batch.targets.shape(), m.target_shape(3));
  // The target is the source reversed; the decoder reads it shifted behind token 0.
  const auto x = batch.inputs.to_int_vector();
  const auto y = batch.targets.to_int_vector();
  for (int t = 0; t < 5; ++t) {
    EXPECT_EQ(y[t], x[4 - t]);
    EXPECT_EQ(x[5 + t], t == 0 ? 0 : y[t - 1]);
  }
}

TEST(ConfigInputs, BadInputsPointAtThem) {
  expect_error(replace(kSeq2seq, "{name: tgt, shape: [5], dtype: i32}",
                       "{name: src, shape: [5], dtype: i32}"),
               4, {"model.inputs[1]", "'src' is declared twice"});
  // Inputs may mix dtypes (they travel as f32), but token ids must be i32.
  expect_error(replace(kSeq2seq, "{name: tgt, shape: [5], dtype: i32}",
                       "{name: tgt, shape: [5], dtype: f32}"),
               10, {"model.graph[4]", "embedding reads i32 token ids", "'tgt' is f32"});
  expect_error(replace(kSeq2seq, "dtype: i32}\n    - {name: tgt", "dtype: i64}\n    - {name: tgt"),
               3, {"'i64' (expected f32 or i32)"});
  expect_error(
      replace(kSeq2seq, "shape: [5], dtype: i32}\n  graph", "shape: [0], dtype: i32}\n  graph"), 4,
      {"dimensions must be in [1,"});
  expect_error(replace(kSeq2seq, "shape: [5], dtype: i32}\n  graph",
                       "shape: [5], dtype: i32, bogus: 1}\n  graph"),
               4, {"bogus"});
  expect_error(replace(kSeq2seq, "model:\n", "model:\n  input: {name: x, shape: [3]}\n"), 2,
               {"either 'input' (one) or 'inputs'"});
  expect_error(replace(kSeq2seq, "inputs: [tgt]", "inputs: [tgx]"), 10,
               {"model.graph[4]", "'tgx'", "neither an earlier node nor an input (src: i32[5]"});
  expect_error(replace(kSeq2seq, "{name: es, layer: embedding, vocab: 7, out: 4, inputs: [src]}",
                       "{name: es, layer: embedding, vocab: 7, out: 4}"),
               6, {"names no input, and the model has several"});
  expect_error(replace(kSeq2seq, "shape: [5, 4]", "shape: [4, 4]"), 9,
               {"model.graph[3]", "another number of elements"});
  expect_error(replace(kSeq2seq, "seed: 3}", "seed: 3, vocab: 9}"), 13, {"vocab", "[2, 7]"});
}

TEST(ConfigInputs, ManyInputsAreRefused) {
  std::string many = "model:\n  inputs:\n";
  for (int i = 0; i < 65; ++i) many += "    - {name: i" + std::to_string(i) + ", shape: [1]}\n";
  many += "  graph:\n    - {name: c, layer: linear, out: 2, inputs: [i0]}\n";
  many += "data: {kind: teacher, samples: 8}\n";
  expect_error(many, 2, {"65 inputs, more than the 64"});
}

}  // namespace
}  // namespace tandem::apps
