// What a config may ask of the machine: sizes checked before anything is built, devices that
// exist, data paths that are files. Each case is refused with file:line and the key.
#include "train/config_limits.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "train/config.hpp"

namespace tandem::apps {
namespace {

// A small machine: 1 GiB, two GPUs, so the answers do not depend on where the test runs.
train::Machine small_machine() {
  return train::Machine{
      .memory_bytes = 1024.0 * 1024 * 1024, .cuda_devices = 2, .cuda_built = true};
}

// Whether `text` loads on `machine`; prints the error when it does not.
bool loads(const std::string& text, const train::Machine& machine = small_machine()) {
  try {
    train::parse_config(text, "test.yaml", machine);
    return true;
  } catch (const train::ConfigError& e) {
    ADD_FAILURE() << e.what();
    return false;
  }
}

// The error `text` gets on `machine` (a train::ConfigError saying "no error" when it loads).
train::ConfigError error_of(const std::string& text,
                            const train::Machine& machine = small_machine()) {
  try {
    train::parse_config(text, "test.yaml", machine);
  } catch (const train::ConfigError& e) {
    return e;
  }
  return train::ConfigError(train::ConfigLocation{}, "", "no error");
}

void expect_error(const std::string& text, int line, std::initializer_list<std::string> words,
                  const train::Machine& machine = small_machine()) {
  const train::ConfigError e = error_of(text, machine);
  const std::string msg = e.what();
  EXPECT_EQ(e.where().line, line) << msg;
  EXPECT_NE(msg.find("test.yaml:" + std::to_string(line) + ":"), std::string::npos) << msg;
  for (const std::string& w : words)
    EXPECT_NE(msg.find(w), std::string::npos) << w << " in " << msg;
}

std::string gpt(const std::string& layers, const std::string& rest = "") {
  return "model: {name: gpt, layers: " + layers +
         ", d_model: 64, heads: 4, seq_len: 16, vocab: 64}\n"
         "data: {kind: markov-text, samples: 256}\n"
         "train: {minibatch: 8, steps: 4, optimizer: {kind: adamw, lr: 0.001}}\n" +
         rest;
}

// A model whose layers would not fit is refused from its formula, before a layer is built:
// 100 million blocks are refused at once (building them would take seconds and gigabytes).
TEST(ConfigLimits, HugeModelsAreRefusedBeforeTheyAreBuilt) {
  const auto start = std::chrono::steady_clock::now();
  expect_error(gpt("100000000"), 1, {"model.layers", "parameters", "more than this machine's"});
  // On this very machine too: whatever its memory, 1e8 blocks of 64 wide do not fit in it
  // as a number of seconds to build.
  expect_error(gpt("100000000"), 1, {"model.layers"}, train::Machine::here());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  expect_error(gpt("4").replace(gpt("4").find("vocab: 64"), 9, "vocab: 100000000"), 1,
               {"model.vocab", "parameters"});
  expect_error(
      "model: {name: mlp, widths: [100000, 100000, 4]}\n"
      "data: {kind: teacher, samples: 64}\n"
      "train: {minibatch: 8, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n",
      1, {"model.widths", "GiB"});
  expect_error(
      "model: {name: vgg16, width_mult: 64}\n"
      "data: {kind: shapes, samples: 64}\n"
      "train: {minibatch: 8, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n",
      1, {"model.width_mult", "parameters"});
  EXPECT_TRUE(loads(gpt("4")));
}

// Dimensions beyond kMaxDimension are refused as such, so no estimate overflows.
TEST(ConfigLimits, DimensionsAreBounded) {
  expect_error(gpt("4").replace(gpt("4").find("seq_len: 16"), 11, "seq_len: 9223372036854775807"),
               1, {"model.seq_len", "must be <="});
  expect_error(
      "model: {name: mlp, widths: [8, 4611686018427387904, 4]}\n"
      "data: {kind: teacher, samples: 64}\n"
      "train: {minibatch: 8, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n",
      1, {"model.widths", "entry 1"});
  expect_error(
      "model: {name: vgg16, image_size: 1048576}\n"
      "data: {kind: shapes, samples: 64}\n"
      "train: {minibatch: 8, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n",
      1, {"model.image_size", "65536"});
  expect_error(gpt("2", "pipeline:\n  stages:\n    - {layers: \"0-4\", replicas: 1000000}\n"), 6,
               {"pipeline.stages[0].replicas", "65536"});
}

// Activations and data are weighed too, at the key that makes them large.
TEST(ConfigLimits, ActivationsAndDataAgainstMemory) {
  std::string big_batch = gpt("2");
  big_batch.replace(big_batch.find("minibatch: 8"), 12, "minibatch: 4000000");
  big_batch.replace(big_batch.find("samples: 256"), 12, "samples: 4000000");
  expect_error(big_batch, 3, {"train.minibatch", "activations of a minibatch"});
  std::string big_data = gpt("2");
  big_data.replace(big_data.find("samples: 256"), 12, "samples: 100000000");
  expect_error(big_data, 2, {"data", "data ", "GiB"});
  // A generated held-out set counts like the training data.
  expect_error(
      gpt("2").replace(gpt("2").find("lr: 0.001}"), 10, "lr: 0.001}, eval: {samples: 100000000}"),
      3, {"train.eval.samples", "data ", "GiB"});
  expect_error(
      gpt("2").replace(gpt("2").find("lr: 0.001}"), 10, "lr: 0.001}, eval: {samples: 99999999999}"),
      3, {"train.eval.samples", "must be <="});
}

// Stages on sim hold no data: a model that does not fit in memory can be planned on sim.
TEST(ConfigLimits, SimStagesHoldNoWeights) {
  std::string text =
      gpt("40000", "pipeline:\n  stages:\n    - {layers: \"0-40002\", device: sim}\n");
  const train::Machine machine = small_machine();
  // 40000 blocks of 64 wide: 2 G parameters, 16 GiB as weights and gradients: too much for the
  // model's own check on 1 GiB...
  expect_error(text, 1, {"model.layers"}, machine);
  EXPECT_TRUE(loads(text, train::Machine{.memory_bytes = 20.0 * 1024 * 1024 * 1024}));
  // ...but on a machine with room for the model's layers, the sim stages' weights cost nothing.
  train::Machine roomy = machine;
  roomy.memory_bytes = 20.0 * 1024 * 1024 * 1024;
  std::string cpu = text;
  cpu.replace(cpu.find("device: sim"), 11, "device: cpu");
  expect_error(cpu, 1, {"model", "weights, gradients and optimizer state"}, roomy);
}

TEST(ConfigLimits, DevicesThatDoNotExist) {
  const std::string stages =
      "pipeline:\n  stages:\n    - {layers: \"0-2\", device: cpu}\n"
      "    - {layers: \"3-4\", device: cuda:2}\n";
  expect_error(gpt("2", stages), 7,
               {"pipeline.stages[1].device", "'cuda:2' does not exist", "2 CUDA devices"});
  train::Machine no_cuda = small_machine();
  no_cuda.cuda_built = false;
  no_cuda.cuda_devices = 0;
  expect_error(gpt("2", stages), 7, {"pipeline.stages[1].device", "no CUDA backend"}, no_cuda);
  std::string one = stages;
  one.replace(one.find("cuda:2"), 6, "cuda:1");
  EXPECT_TRUE(loads(gpt("2", one)));
  expect_error(gpt("2", "pipeline:\n  stages:\n    - {layers: \"0-4\", device: tpu}\n"), 6,
               {"pipeline.stages[0].device", "tpu"});
}

TEST(ConfigLimits, MinibatchLargerThanTheData) {
  std::string text = gpt("2");
  text.replace(text.find("minibatch: 8"), 12, "minibatch: 512");
  expect_error(text, 3, {"train.minibatch", "512 samples per minibatch", "256"});
}

// A data path that is a directory or a device is refused at its key, not read forever.
TEST(ConfigLimits, DataPathsMustBeFiles) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string head =
      "model: {name: gpt, layers: 1, d_model: 8, heads: 2, seq_len: 4, "
      "vocab: 16}\n";
  const std::string train = "train: {minibatch: 2, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n";
  expect_error(head + "data: {kind: tokens, path: /dev/zero}\n" + train, 2,
               {"data.path", "/dev/zero", "not a regular file"});
  expect_error(head + "data: {kind: tokens, path: " + dir.string() + "}\n" + train, 2,
               {"data.path", "is a directory"});
  expect_error(head + "data: {kind: tokens, path: a.bin, eval_path: /dev/zero}\n" + train, 2,
               {"data.eval_path"});
  expect_error("model: {name: mlp, widths: [3072, 10]}\ndata: {kind: cifar10, files: [" +
                   dir.string() + "]}\n" + train,
               2, {"data.files", "is a directory"});
  expect_error(
      "model: {name: mlp, widths: [784, 10]}\n"
      "data: {kind: mnist, images: /dev/null, labels: x}\n" +
          train,
      2, {"data.images", "not a regular file"});
}

TEST(ConfigLimits, ConfigPathsMustBeFiles) {
  for (const char* path : {"/dev/zero", "/tmp"}) {
    try {
      train::load_config(path, small_machine());
      ADD_FAILURE() << path;
    } catch (const train::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem::apps
