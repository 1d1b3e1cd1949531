// `tandem profile` end to end on a tiny MLP: parse the command line, measure, write the
// profile, read it back with load_profile, and plan from it with `tandem plan`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "models/model.hpp"
#include "planner/profile.hpp"
#include "train/config.hpp"
#include "train/config_error.hpp"

namespace tandem::apps {
namespace {

const std::filesystem::path kExamples =
    std::filesystem::path(TANDEM_SOURCE_DIR) / "configs/examples";

// Runs `tandem ARGS` with the profile and plan commands; returns what it printed.
std::string run(const std::vector<std::string>& args) {
  CLI::App app{"tandem"};
  add_profile_command(app);
  add_plan_command(app);
  std::vector<const char*> argv{"tandem"};
  for (const auto& a : args) argv.push_back(a.c_str());
  testing::internal::CaptureStdout();
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (...) {
    testing::internal::GetCapturedStdout();
    throw;
  }
  return testing::internal::GetCapturedStdout();
}

constexpr const char* kConfig =
    "model: {name: mlp, widths: [8, 32, 32, 4]}\n"
    "data: {kind: teacher, samples: 64, seed: 1, hidden: 8}\n"
    "train: {minibatch: 16, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n";

class ProfileCommand : public testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_);
    std::ofstream(config_) << kConfig;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() /
      ("tandem_profile_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
       testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::path config_ = dir_ / "mlp.yaml";
  std::filesystem::path profile_ = dir_ / "profile.json";
};

double float_bytes(const Shape& shape) {
  return static_cast<double>(shape_numel(shape)) * 4;
}

TEST_F(ProfileCommand, OneEntryPerLayerThatPlanReads) {
  const std::string printed = run({"profile", config_.string(), "-o", profile_.string(),
                                   "--repeats", "1", "--warmup", "0", "--quiet"});
  EXPECT_NE(printed.find("wrote"), std::string::npos) << printed;

  const planner::Profile profile = planner::load_profile(profile_);
  const train::Config config = train::parse_config(kConfig, "mlp.yaml");
  const models::Model model = models::Model::build(config.model);
  const std::vector<Shape> outputs = model.activation_shapes(16);
  EXPECT_EQ(profile.minibatch, 16);
  ASSERT_EQ(profile.layers.size(), static_cast<std::size_t>(model.num_layers()));
  for (int i = 0; i < model.num_layers(); ++i) {
    const planner::LayerProfile& layer = profile.layers[static_cast<std::size_t>(i)];
    SCOPED_TRACE("layer " + std::to_string(i) + " " + layer.name);
    EXPECT_EQ(layer.name, model.layer(i).describe());
    EXPECT_GE(layer.forward_ms, 0);
    EXPECT_GE(layer.backward_weight_ms, 0);
    EXPECT_GE(layer.backward_ms, layer.backward_weight_ms);
    EXPECT_GE(layer.forward_fixed_ms, 0);
    EXPECT_LE(layer.forward_fixed_ms, layer.forward_ms);
    EXPECT_LE(layer.backward_fixed_ms, layer.backward_ms);
    EXPECT_EQ(layer.activation_bytes, float_bytes(outputs[static_cast<std::size_t>(i)]));
    double parameters = 0;
    for (const auto& spec : model.layer(i).param_specs()) parameters += float_bytes(spec.shape);
    EXPECT_EQ(layer.parameter_bytes, parameters);
    // A weight gradient needs the layer's input: the forward keeps at least that.
    if (parameters > 0) {
      const Shape input = i == 0 ? model.input_shape(16) : outputs[static_cast<std::size_t>(i - 1)];
      EXPECT_GE(layer.memory_bytes, float_bytes(input));
    }
  }
  // Layer 0's input gradient is never needed: its whole backward is the weight gradient.
  EXPECT_EQ(profile.layers.front().backward_ms, profile.layers.front().backward_weight_ms);

  const std::string cluster = (kExamples / "cluster-cpu4.yaml").string();
  const std::string planned = run(
      {"plan", "--profile", profile_.string(), "--cluster", cluster, "--schedule", "pipedream"});
  EXPECT_NE(planned.find("predicted time per minibatch"), std::string::npos) << planned;
  const std::string umpipe =
      run({"plan", "--profile", profile_.string(), "--cluster", cluster, "--schedule", "umpipe",
           "--stages", "2", "--population", "8", "--generations", "3"});
  EXPECT_NE(umpipe.find("predicted time per minibatch"), std::string::npos) << umpipe;
}

TEST_F(ProfileCommand, MinibatchOptionScalesTheSizes) {
  run({"profile", config_.string(), "-o", profile_.string(), "--repeats", "1", "--warmup", "0",
       "--minibatch", "4", "--no-fixed-parts", "--quiet"});
  const planner::Profile profile = planner::load_profile(profile_);
  const models::Model model = models::Model::build(train::parse_config(kConfig, "mlp.yaml").model);
  EXPECT_EQ(profile.minibatch, 4);
  ASSERT_EQ(profile.layers.size(), static_cast<std::size_t>(model.num_layers()));
  EXPECT_EQ(profile.layers.back().activation_bytes, float_bytes(model.activation_shapes(4).back()));
  for (const auto& layer : profile.layers) {
    EXPECT_EQ(layer.forward_fixed_ms, 0);
    EXPECT_EQ(layer.backward_fixed_ms, 0);
  }
}

// Two copies at once, each on its share of the cores: the same layers and sizes, the copies'
// count recorded, and the optimizer's update of every layer with weights timed.
TEST_F(ProfileCommand, ConcurrentCopiesAreRecordedAndTheUpdateIsTimed) {
  run({"profile", config_.string(), "-o", profile_.string(), "--repeats", "2", "--warmup", "0",
       "--concurrent", "2", "--quiet"});
  const planner::Profile profile = planner::load_profile(profile_);
  const models::Model model = models::Model::build(train::parse_config(kConfig, "mlp.yaml").model);
  EXPECT_EQ(profile.concurrent, 2);
  ASSERT_EQ(profile.layers.size(), static_cast<std::size_t>(model.num_layers()));
  for (const auto& layer : profile.layers) {
    SCOPED_TRACE(layer.name);
    EXPECT_GT(layer.forward_ms, 0);
    if (layer.parameter_bytes > 0) {
      EXPECT_GT(layer.step_ms, 0);
    }
  }
  run({"profile", config_.string(), "-o", profile_.string(), "--repeats", "1", "--warmup", "0",
       "--no-step", "--quiet"});
  const planner::Profile unstepped = planner::load_profile(profile_);
  EXPECT_EQ(unstepped.concurrent, 1);
  for (const auto& layer : unstepped.layers) EXPECT_EQ(layer.step_ms, 0);
  EXPECT_THROW(run({"profile", config_.string(), "-o", profile_.string(), "--concurrent", "0"}),
               std::exception);
}

TEST_F(ProfileCommand, ErrorsNameTheProblem) {
  // More samples per minibatch than the data holds.
  try {
    run({"profile", config_.string(), "-o", profile_.string(), "--minibatch", "128", "--quiet"});
    FAIL() << "no error";
  } catch (const train::ConfigError& e) {
    EXPECT_EQ(e.key(), "data");
    EXPECT_NE(std::string(e.what()).find("fewer samples"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(profile_));
  EXPECT_THROW(run({"profile", (dir_ / "missing.yaml").string(), "-o", profile_.string()}),
               train::ConfigError);
  EXPECT_THROW(run({"profile", config_.string(), "-o", profile_.string(), "--repeats", "0"}),
               CLI::ValidationError);
}

}  // namespace
}  // namespace tandem::apps
