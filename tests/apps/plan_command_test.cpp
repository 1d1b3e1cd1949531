// `tandem plan` end to end on the example profile and clusters: parse the command line, plan,
// print, write the pipeline section, and read that section back with the config loader.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/config.hpp"

namespace tandem::apps {
namespace {

// The example profile is a 16-layer GPT (embedding, 13 blocks, LayerNorm, head); the configs
// below name a model with as many layers, since the loader checks the stages against it.
const std::filesystem::path kExamples =
    std::filesystem::path(TANDEM_SOURCE_DIR) / "configs/examples";

// Runs `tandem plan ARGS`; returns what it printed.
std::string run(std::vector<std::string> args) {
  CLI::App app{"tandem"};
  add_plan_command(app);
  args.insert(args.begin(), "plan");
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

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class PlanCommand : public testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove(output_); }
  std::filesystem::path output_ =
      std::filesystem::temp_directory_path() /
      ("tandem_plan_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
       testing::UnitTest::GetInstance()->current_test_info()->name() + ".yaml");
};

TEST_F(PlanCommand, PipeDreamWritesAPipelineTheConfigLoaderReads) {
  const std::string printed = run({"--profile", (kExamples / "profile-gpt14.json").string(),
                                   "--cluster", (kExamples / "cluster-2x4.yaml").string(),
                                   "--schedule", "pipedream", "-o", output_.string()});
  EXPECT_NE(printed.find("predicted time per minibatch"), std::string::npos) << printed;
  EXPECT_NE(printed.find("NOAM"), std::string::npos) << printed;
  const std::string config =
      "model: {name: gpt, layers: 13, d_model: 8, heads: 2, seq_len: 4, vocab: 8}\n"
      "data: {kind: markov-text, samples: 64}\n"
      "train: {minibatch: 32, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n" +
      read(output_);
  const Config parsed = parse_config(config, "planned.yaml");
  ASSERT_TRUE(parsed.pipeline.has_value());
  EXPECT_EQ(parsed.pipeline->schedule, "pipedream");
  ASSERT_FALSE(parsed.pipeline->stages.empty());
  EXPECT_EQ(parsed.pipeline->stages.front().first_layer, 0);
  EXPECT_EQ(parsed.pipeline->stages.back().last_layer, 15);
  int replicas = 0;
  for (const auto& stage : parsed.pipeline->stages) replicas += stage.replicas;
  EXPECT_LE(replicas, 8);
}

TEST_F(PlanCommand, OneFOneBChoosesSlices) {
  const std::string printed = run({"--profile", (kExamples / "profile-gpt14.json").string(),
                                   "--cluster", (kExamples / "cluster-cpu4.yaml").string(),
                                   "--schedule", "1f1b", "-o", output_.string()});
  EXPECT_NE(printed.find("equal slices"), std::string::npos) << printed;
  const std::string config =
      "model: {name: gpt, layers: 13, d_model: 8, heads: 2, seq_len: 4, vocab: 8}\n"
      "data: {kind: markov-text, samples: 64}\n"
      "train: {minibatch: 32, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n" +
      read(output_);
  const Config parsed = parse_config(config, "planned.yaml");
  ASSERT_TRUE(parsed.pipeline.has_value());
  EXPECT_EQ(parsed.pipeline->schedule, "1f1b");
  EXPECT_EQ(parsed.pipeline->stages.size(), 4u);
  ASSERT_EQ(parsed.pipeline->slices.size(), 1u);
  EXPECT_GE(parsed.pipeline->slices.front(), 1);
}

TEST_F(PlanCommand, ErrorsNameTheProblem) {
  EXPECT_THROW(run({"--profile", "/nonexistent.json", "--cluster",
                    (kExamples / "cluster-cpu4.yaml").string()}),
               std::runtime_error);
  try {
    run({"--profile", (kExamples / "profile-gpt14.json").string(), "--cluster",
         (kExamples / "cluster-cpu4.yaml").string(), "--schedule", "gpipe", "--stages", "20"});
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("the cluster has 4 workers"), std::string::npos)
        << e.what();
  }
  EXPECT_ANY_THROW(run({"--profile", (kExamples / "profile-gpt14.json").string(), "--cluster",
                        (kExamples / "cluster-cpu4.yaml").string(), "--schedule", "fast"}));
}

}  // namespace
}  // namespace tandem::apps
