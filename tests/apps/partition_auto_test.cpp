// `partition: auto`: the planner picks a pipeline section's stages from a profile and a
// cluster; what it picks trains like a hand-written section, and what it needs is checked with
// the file and line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "train/config.hpp"
#include "train/config_check.hpp"
#include "train/config_error.hpp"
#include "train/session.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;

fs::path source_path(const std::string& relative) {
  return fs::path(TANDEM_SOURCE_DIR) / relative;
}

TEST(PartitionAuto, ShippedConfigPlansEveryLayerAndTrains) {
  const train::Config c = train::load_config(source_path("configs/gpt-pipeline-auto.yaml"));
  ASSERT_TRUE(c.pipeline.has_value());
  ASSERT_FALSE(c.pipeline->stages.empty());
  int64_t next = 0, workers = 0;
  for (const train::StageSpec& s : c.pipeline->stages) {
    EXPECT_EQ(s.first_layer, next);
    next = s.last_layer + 1;
    workers += s.replicas;
  }
  EXPECT_EQ(next, 7);     // the GPT's 7 layers, all placed
  EXPECT_LE(workers, 4);  // the cluster's 4 workers
  EXPECT_GE(workers, 1);
  train::Session trainer(c, train::SessionOptions{.steps = 2});
  EXPECT_EQ(trainer.run().steps, 2);
}

class TempConfig {
 public:
  explicit TempConfig(const std::string& pipeline) {
    dir_ = fs::temp_directory_path() / ("tandem-auto-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    fs::copy_file(source_path("configs/examples/profile-gpt-default.json"), dir_ / "profile.json",
                  fs::copy_options::overwrite_existing);
    fs::copy_file(source_path("configs/examples/cluster-cpu4.yaml"), dir_ / "cluster.yaml",
                  fs::copy_options::overwrite_existing);
    std::ofstream(dir_ / "run.yaml")
        << "model: {name: gpt, layers: 4, d_model: 64, heads: 4, seq_len: 32, vocab: 32}\n"
           "data: {kind: markov-text, vocab: 16, samples: 512, seed: 1}\n"
           "train: {minibatch: 32, steps: 4, optimizer: {kind: adamw, lr: 1.0e-3}}\n"
           "pipeline:\n"
        << pipeline;
  }
  ~TempConfig() { fs::remove_all(dir_); }
  fs::path path() const { return dir_ / "run.yaml"; }

 private:
  fs::path dir_;
};

void expect_error(const std::string& pipeline, const std::string& where, const std::string& what) {
  TempConfig c(pipeline);
  try {
    (void)train::load_config(c.path());
    ADD_FAILURE() << "accepted:\n" << pipeline;
  } catch (const train::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(where), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

TEST(PartitionAuto, RefusesWhatItCannotPlan) {
  // Paths are relative to the config.
  TempConfig ok(
      "  schedule: 1f1b\n  partition: auto\n  profile: profile.json\n"
      "  cluster: cluster.yaml\n");
  EXPECT_NO_THROW((void)train::load_config(ok.path()));
  expect_error("  partition: auto\n  cluster: cluster.yaml\n", "run.yaml:5:", "needs profile");
  expect_error("  partition: manual\n  profile: profile.json\n  cluster: cluster.yaml\n",
               "pipeline.partition", "expected auto");
  expect_error("  partition: auto\n  profile: missing.json\n  cluster: cluster.yaml\n",
               "pipeline.profile", "missing.json");
  expect_error(
      "  partition: auto\n  profile: profile.json\n  cluster: cluster.yaml\n"
      "  stages:\n    - {layers: \"0-6\"}\n",
      "pipeline.stages", "not both");
  // A profile of another model.
  TempConfig other("  partition: auto\n  profile: profile.json\n  cluster: cluster.yaml\n");
  {
    std::ofstream(other.path().parent_path() / "profile.json")
        << R"({"model": "x", "device": "cpu", "minibatch": 32, "layers": [)"
           R"({"name": "a", "forward_ms": 1, "backward_ms": 2, "activation_bytes": 4,)"
           R"( "backward_weight_ms": 1, "parameter_bytes": 4, "memory_bytes": 4}]})";
    try {
      (void)train::load_config(other.path());
      ADD_FAILURE() << "a one-layer profile planned a 7-layer model";
    } catch (const train::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("profiles 1 layers"), std::string::npos) << e.what();
    }
  }
}

// The reader only reads: the planner's files and the machine's devices are the check's, which
// reports them at their keys' lines; the checked config holds its model, built once.
TEST(PartitionAuto, ReadingLeavesPlanningAndTheMachineToTheCheck) {
  train::Machine machine;
  machine.memory_bytes = 64e9;
  machine.cuda_built = true;  // a build with CUDA on a machine without GPUs
  TempConfig missing("  partition: auto\n  profile: missing.json\n  cluster: cluster.yaml\n");
  std::ifstream in(missing.path());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  train::Config read =
      train::read_config(text, missing.path().string(), train::ConfigOverrides{}, machine);
  EXPECT_TRUE(read.planning.partition);
  ASSERT_TRUE(read.planning.profile.has_value());
  EXPECT_EQ(*read.planning.profile, missing.path().parent_path() / "missing.json");
  ASSERT_TRUE(read.pipeline.has_value());
  EXPECT_TRUE(read.pipeline->stages.empty());
  EXPECT_EQ(read.model_built, nullptr);
  try {
    train::check_config(read, machine);
    ADD_FAILURE() << "planned from a missing profile";
  } catch (const train::ConfigError& e) {
    EXPECT_EQ(e.key(), "pipeline.profile") << e.what();
    EXPECT_EQ(e.where().line, 6) << e.what();  // the profile key's line
  }

  TempConfig gpu(
      "  schedule: 1f1b\n  stages:\n    - {layers: \"0-2\"}\n"
      "    - {layers: \"3-6\",\n       device: \"cuda:7\"}\n");
  std::ifstream gin(gpu.path());
  const std::string gtext((std::istreambuf_iterator<char>(gin)), std::istreambuf_iterator<char>());
  train::Config staged =
      train::read_config(gtext, gpu.path().string(), train::ConfigOverrides{}, machine);
  ASSERT_EQ(staged.pipeline->stages.size(), 2u);
  EXPECT_EQ(staged.pipeline->stages[1].device.str(), "cuda:7");
  try {
    train::check_config(staged, machine);
    ADD_FAILURE() << "a stage on cuda:7 of a machine without GPUs";
  } catch (const train::ConfigError& e) {
    EXPECT_EQ(e.key(), "pipeline.stages[1].device") << e.what();
    EXPECT_EQ(e.where().line, 8) << e.what();  // the device key's line, not the stage's
    EXPECT_NE(std::string(e.what()).find("has 0 CUDA devices"), std::string::npos) << e.what();
  }

  TempConfig ok("  partition: auto\n  profile: profile.json\n  cluster: cluster.yaml\n");
  const train::Config checked = train::load_config(ok.path(), machine);
  ASSERT_NE(checked.model_built, nullptr);
  EXPECT_EQ(checked.model_built->num_layers(), checked.pipeline->stages.back().last_layer + 1);
  EXPECT_EQ(checked.where.stages.size(), checked.pipeline->stages.size());
}

}  // namespace
}  // namespace tandem::apps
