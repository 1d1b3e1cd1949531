// Serving through the API: Session::predict from a live session, from a finished checkpoint and
// from a whole-model file the API wrote give the same outputs; save_weights / load_weights round
// trip and init_from starts from what save_weights wrote.
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
  input: {name: x, shape: [8]}
  graph:
    - {name: h0, layer: linear, out: 16, activation: relu}
    - {name: h1, layer: linear, out: 16, activation: relu}
    - {name: h2, layer: linear, out: 16}
    - {name: r, layer: add, inputs: [h2, h0]}
    - {name: out, layer: linear, out: 4}
data: {kind: teacher, samples: 2048, seed: 1, hidden: 8}
train:
  minibatch: 32
  steps: 8
  optimizer: {kind: sgd, lr: 0.05}
  seed: 4
pipeline:
  schedule: 1f1b
  slices: 4
  stages:
    - {layers: "0-1", replicas: 2}
    - {layers: "2"}
    - {layers: "3-4"}
)";

Tensor inputs(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n * 8));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 19) / 9.0f - 1;
  return Tensor::from_vector(v, {n, 8});
}

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(Predict, LiveSessionCheckpointAndWeightsFileAgree) {
  TempDir dir;
  const std::filesystem::path config = dir.write("g.yaml", kConfig);
  const Tensor x = inputs(10);

  ConfigRunOptions train_options;
  train_options.checkpoints.dir = (dir.path() / "ckpt").string();
  Session trained(config.string(), train_options);
  const Tensor before = trained.predict(x);
  trained.run();
  const Tensor live = trained.predict(x);
  ASSERT_EQ(live.shape(), (Shape{10, 4}));
  EXPECT_NE(values(live), values(before));  // the run changed the weights

  // The finished checkpoint: no steps left to train, and still served.
  ConfigRunOptions from_checkpoint;
  from_checkpoint.weights = (dir.path() / "ckpt").string();
  EXPECT_EQ(values(Session(config.string(), from_checkpoint).predict(x)), values(live));

  // The whole model written by the API, read back by it and by a session.
  Weights w;
  w.model = trained.model_name();
  w.step = 8;
  w.tensors = trained.weights();
  const std::string file = (dir.path() / "model.safetensors").string();
  save_weights(file, w);
  const Weights back = load_weights(file);
  EXPECT_EQ(back.model, w.model);
  EXPECT_EQ(back.step, 8);
  ASSERT_EQ(back.tensors.size(), w.tensors.size());
  for (std::size_t i = 0; i < w.tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].name, w.tensors[i].name);
    EXPECT_EQ(values(back.tensors[i].value), values(w.tensors[i].value)) << w.tensors[i].name;
  }
  ConfigRunOptions from_file;
  from_file.weights = file;
  EXPECT_EQ(values(Session(config.string(), from_file).predict(x)), values(live));

  // One slice per row, or two: the rows do not depend on how the inputs are cut.
  PredictOptions one;
  one.slices = 10;
  EXPECT_EQ(values(trained.predict(x, one)), values(live));
}

TEST(Predict, InitFromStartsFromWhatSaveWeightsWrote) {
  TempDir dir;
  const std::filesystem::path config = dir.write("g.yaml", kConfig);
  Session trained(config.string());
  trained.run();
  Weights w;
  w.model = trained.model_name();
  w.tensors = trained.weights();
  const std::string file = (dir.path() / "model.safetensors").string();
  save_weights(file, w);
  // A config that starts from the file: before any step its outputs are the trained ones.
  std::string text = kConfig;
  text.replace(text.find("  seed: 4\n"), 10, "  seed: 4\n  init_from: " + file + "\n");
  const std::filesystem::path warm = dir.write("warm.yaml", text);
  const Tensor x = inputs(6);
  EXPECT_EQ(values(Session(warm.string()).predict(x)), values(trained.predict(x)));
}

TEST(Predict, BadInputsAndFilesAreRefusedNamingThem) {
  TempDir dir;
  const std::filesystem::path config = dir.write("g.yaml", kConfig);
  Session s(config.string());
  for (const Tensor& bad : {Tensor::from_vector(std::vector<float>(9, 0.0f), {1, 9}),
                            Tensor::from_vector(std::vector<std::int32_t>(8, 0), {1, 8})}) {
    try {
      (void)s.predict(bad);
      ADD_FAILURE() << "predicted " << bad.describe();
    } catch (const tandem::Error& e) {
      EXPECT_EQ(e.code(), tandem::ErrorCode::data) << e.what();
    }
  }
  const std::string missing = (dir.path() / "nope.safetensors").string();
  try {
    (void)load_weights(missing);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  const std::string junk = dir.write("junk.safetensors", "not a safetensors file").string();
  EXPECT_THROW((void)load_weights(junk), std::invalid_argument);
  Weights dup;
  dup.model = "m";
  dup.tensors = {{"0.weight", Tensor::zeros({2})}, {"0.weight", Tensor::zeros({2})}};
  EXPECT_THROW(save_weights((dir.path() / "dup.safetensors").string(), dup), std::invalid_argument);
  ConfigRunOptions wrong;
  wrong.weights = junk;
  try {
    Session bad(config.string(), wrong);
    ADD_FAILURE() << "accepted " << junk;
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::checkpoint) << e.what();
    EXPECT_EQ(e.where().key, "ConfigRunOptions.weights") << e.what();
  }
}

}  // namespace
}  // namespace tandem
