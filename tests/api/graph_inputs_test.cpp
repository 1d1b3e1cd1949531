// A graph with named inputs built in code (Model::graph with ModelInput): the same
// sequence-to-sequence graph as a config's `model: {inputs, graph}` trains to the same weights
// bit for bit, and Model::pack_inputs checks what it packs, naming the input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tandem/tandem.hpp>
#include <vector>

#include "../train/temp_dir.hpp"

namespace tandem {
namespace {

using apps::testing::TempDir;

const char* kConfig = R"(model:
  inputs:
    - {name: src, shape: [5], dtype: i32}
    - {name: tgt, shape: [5], dtype: i32}
  graph:
    - {name: es, layer: embedding, vocab: 8, out: 6, inputs: [src]}
    - {name: f, layer: flatten}
    - {name: m, layer: linear, out: 30, activation: relu}
    - {name: p, layer: reshape, shape: [5, 6]}
    - {name: et, layer: embedding, vocab: 8, out: 6, inputs: [tgt]}
    - {name: c, layer: concat, inputs: [p, et]}
    - {name: out, layer: linear, out: 8}
data: {kind: sequence-pairs, samples: 512, seed: 2}
train:
  minibatch: 16
  steps: 10
  optimizer: {kind: adamw, lr: 0.01}
  seed: 4
pipeline:
  schedule: 1f1b
  slices: 4
  stages:
    - {layers: "0-1"}
    - {layers: "2-3"}
    - {layers: "4-5"}
    - {layers: "6"}
)";

Model code_model() {
  using layers::Activation;
  return Model::graph({{"src", {5}, DType::i32}, {"tgt", {5}, DType::i32}},
                      {
                          {"es", layers::embedding(8, 6, 5), {"src"}},
                          {"f", layers::flatten(), {}},
                          {"m", layers::linear(30, 30, Activation::relu), {}},
                          {"p", layers::reshape({5, 6}), {}},
                          {"et", layers::embedding(8, 6, 5), {"tgt"}},
                          {"c", layers::concat({6, 6}), {"p", "et"}},
                          {"out", layers::linear(12, 8), {}},
                      });
}

TEST(GraphInputs, CodeBuiltGraphTrainsAsTheConfigsBitForBit) {
  TempDir dir;
  const std::filesystem::path config = dir.path() / "s2s.yaml";
  std::ofstream(config) << kConfig;
  Session from_config(config.string());
  const TrainResult want = from_config.run();

  const Model model = code_model();
  EXPECT_EQ(model.input_dtype(), DType::i32);
  const ConfigData data = config_data(config.string());
  TrainOptions o;
  o.plan = Plan::split_evenly(model, 4, Schedule::one_f_one_b, data.minibatch, 4);
  o.minibatches = 10;
  o.optimizer = tandem::AdamWOptions{.lr = 0.01};
  o.seed = 4;
  o.data = data.data;
  Session from_code(model, std::move(o));
  const TrainResult got = from_code.run();
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.weights_fingerprint, want.weights_fingerprint);
}

TEST(GraphInputs, PackInputsNamesWhatDoesNotFit) {
  const Model model = code_model();
  const Tensor src = Tensor::from_vector(std::vector<std::int32_t>{1, 2, 3, 4, 5}, {1, 5});
  const Tensor tgt = Tensor::from_vector(std::vector<std::int32_t>{0, 5, 4, 3, 2}, {1, 5});
  const Tensor x = model.pack_inputs({{"tgt", tgt}, {"src", src}});
  EXPECT_EQ(x.shape(), (Shape{1, 10}));
  EXPECT_EQ(x.to_int_vector(), (std::vector<std::int32_t>{1, 2, 3, 4, 5, 0, 5, 4, 3, 2}));
  auto error = [&](const std::vector<NamedTensor>& named) {
    try {
      (void)model.pack_inputs(named);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error({{"src", src}}).find("'tgt': missing"), std::string::npos);
  EXPECT_NE(error({{"src", src}, {"tgt", Tensor::zeros({1, 5})}}).find("'tgt': is f32"),
            std::string::npos);
  EXPECT_NE(error({{"src", src}, {"tgt", tgt.reshape({5, 1})}}).find("shape [5, 1]"),
            std::string::npos);
  EXPECT_THROW((void)Model::mlp({4, 2}).pack_inputs({}), std::invalid_argument);
}

}  // namespace
}  // namespace tandem
