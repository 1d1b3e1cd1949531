// `tandem plan` end to end on the example profile and clusters: parse the command line, plan,
// print, write the pipeline section, and read that section back with the config loader.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/usage_error.hpp"
#include "planner/cluster.hpp"
#include "planner/pipeline_planner.hpp"
#include "planner/plan_output.hpp"
#include "planner/profile.hpp"
#include "train/config.hpp"
#include "train/job_plan.hpp"

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

struct Printed {
  std::string out, err;
};

// Runs `tandem plan ARGS`; returns what it printed on stdout and on stderr.
Printed run_printing(std::vector<std::string> args) {
  testing::internal::CaptureStderr();
  Printed printed;
  try {
    printed.out = run(std::move(args));
  } catch (...) {
    testing::internal::GetCapturedStderr();
    throw;
  }
  printed.err = testing::internal::GetCapturedStderr();
  return printed;
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
  // The cluster's eight GPUs: checked against a machine that has them.
  const train::Config parsed = train::parse_config(
      config, "planned.yaml",
      train::Machine{.memory_bytes = 1e12, .cuda_devices = 8, .cuda_built = true});
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
  const train::Config parsed = train::parse_config(config, "planned.yaml");
  ASSERT_TRUE(parsed.pipeline.has_value());
  EXPECT_EQ(parsed.pipeline->schedule, "1f1b");
  EXPECT_EQ(parsed.pipeline->stages.size(), 4u);
  ASSERT_EQ(parsed.pipeline->slices.size(), 1u);
  EXPECT_GE(parsed.pipeline->slices.front(), 1);
}

TEST_F(PlanCommand, AutoRanksEveryScheduleAndWritesThePick) {
  const std::string printed = run({"--profile", (kExamples / "profile-gpt14.json").string(),
                                   "--cluster", (kExamples / "cluster-cpu4.yaml").string(),
                                   "--schedule", "auto", "-o", output_.string()});
  for (const char* words : {"stages x replicas", "<- pick", "zb-v", "gpipe+remat",
                            "dropped: asynchronous", "predicted time per minibatch"}) {
    EXPECT_NE(printed.find(words), std::string::npos) << words << " in\n" << printed;
  }
  const std::string config =
      "model: {name: gpt, layers: 13, d_model: 8, heads: 2, seq_len: 4, vocab: 8}\n"
      "data: {kind: markov-text, samples: 64}\n"
      "train: {minibatch: 32, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n" +
      read(output_);
  const train::Config parsed = train::parse_config(config, "planned.yaml");
  ASSERT_TRUE(parsed.pipeline.has_value());
  // The first row of the table is the schedule written.
  const std::string first_row = printed.substr(printed.find('\n') + 1);
  EXPECT_EQ(first_row.rfind(parsed.pipeline->schedule + " ", 0), 0u) << printed;
  EXPECT_THROW(
      run({"--profile", (kExamples / "profile-gpt14.json").string(), "--cluster",
           (kExamples / "cluster-cpu4.yaml").string(), "--schedule", "auto", "--stages", "2"}),
      UsageError);
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

// `tandem plan` writes a config that `tandem train` runs unchanged: read back, the pipeline
// section gives the same plan, every replica's device included.
TEST_F(PlanCommand, WrittenPipelineGivesBackThePlanWithEveryReplicasDevice) {
  const auto profile = planner::load_profile(kExamples / "profile-gpt14.json");
  const auto cluster = planner::load_cluster(kExamples / "cluster-2x4.yaml");
  const planner::PlannedPipeline planned = planner::plan_pipeline(profile, cluster, {});
  int replicated = 0;
  for (const auto& stage : planned.plan.stages) replicated += stage.replicas.size() > 1 ? 1 : 0;
  ASSERT_GT(replicated, 0) << planner::format_plan(planned);  // else the test shows nothing
  const std::string config =
      "model: {name: gpt, layers: 13, d_model: 8, heads: 2, seq_len: 4, vocab: 8}\n"
      "data: {kind: markov-text, samples: 64}\n"
      "train: {minibatch: 32, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n" +
      planner::pipeline_yaml(planned);
  // Checked against a machine with the cluster's eight GPUs.
  const train::Config parsed = train::parse_config(
      config, "planned.yaml",
      train::Machine{.memory_bytes = 1e12, .cuda_devices = 8, .cuda_built = true});
  const schedules::Plan back = train::pipeline_plan(*parsed.pipeline, 32, 16, 1);
  ASSERT_EQ(back.stages.size(), planned.plan.stages.size());
  int replicas = 0;
  for (std::size_t s = 0; s < back.stages.size(); ++s) {
    EXPECT_EQ(back.stages[s].layers, planned.plan.stages[s].layers) << s;
    ASSERT_EQ(back.stages[s].replicas.size(), planned.plan.stages[s].replicas.size()) << s;
    for (std::size_t r = 0; r < back.stages[s].replicas.size(); ++r) {
      EXPECT_EQ(back.stages[s].replicas[r].device, planned.plan.stages[s].replicas[r].device)
          << "stage " << s << " replica " << r;
      ++replicas;
    }
  }
  EXPECT_EQ(back.schedule.kind, planned.plan.schedule.kind);
  EXPECT_GT(replicas, static_cast<int>(back.stages.size()));
}

TEST_F(PlanCommand, JsonOutput) {
  const std::string printed =
      run({"--profile", (kExamples / "profile-gpt14.json").string(), "--cluster",
           (kExamples / "cluster-cpu4.yaml").string(), "--schedule", "1f1b", "--json"});
  const nlohmann::json j = nlohmann::json::parse(printed);
  EXPECT_EQ(j["schedule"], "1f1b");
  EXPECT_GT(j["time_per_minibatch_ms"].get<double>(), 0);
  ASSERT_EQ(j["stages"].size(), 4u);
  EXPECT_EQ(j["stages"][0]["layers"][0], 0);
  EXPECT_EQ(j["stages"][3]["layers"][1], 15);
  EXPECT_EQ(j["stages"][0]["replicas"][0]["device"], "cpu");
}

// The GA reports its generations on stderr, the last one always, and --quiet silences it; the
// plan on stdout is the same either way.
TEST_F(PlanCommand, UmpipeReportsGenerationsOnStderrUnlessQuiet) {
  const std::string profile = (kExamples / "profile-gpt14.json").string();
  const std::string cluster = (kExamples / "cluster-cpu4.yaml").string();
  const std::vector<std::string> args = {"--profile", profile,         "--cluster", cluster,
                                         "-s",        "umpipe",        "--json",    "--population",
                                         "16",        "--generations", "20"};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> all = args;
    all.insert(all.end(), more.begin(), more.end());
    return all;
  };
  // Interval 0: a line per generation, which no timing can make flaky.
  const Printed every = run_printing(with({"--progress-interval", "0"}));
  EXPECT_NE(every.err.find("plan: generation 1/20, best makespan "), std::string::npos)
      << every.err;
  EXPECT_NE(every.err.find(" s elapsed, ETA "), std::string::npos) << every.err;
  const auto last = every.err.find("plan: generation 20/20, best makespan ");
  ASSERT_NE(last, std::string::npos) << every.err;
  const std::string last_line = every.err.substr(last, every.err.find('\n', last) - last);
  EXPECT_EQ(last_line.find("ETA"), std::string::npos) << last_line;
  EXPECT_LT(last, every.err.find("plan: done in "));
  EXPECT_EQ(nlohmann::json::parse(every.out)["schedule"], "umpipe");

  // The default interval: however fast the search, the last generation is reported.
  const Printed paced = run_printing(args);
  EXPECT_NE(paced.err.find("plan: generation 20/20"), std::string::npos) << paced.err;

  const Printed quiet = run_printing(with({"--quiet", "--progress-interval", "0"}));
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(quiet.out, every.out);
  EXPECT_EQ(paced.out, every.out);
}

// Flags the schedule ignores, out-of-range values, outputs over inputs or directories, and
// profiles whose sums overflow are refused.
TEST_F(PlanCommand, RefusesWhatWouldBeIgnoredOrDestroyed) {
  const std::string profile = (kExamples / "profile-gpt14.json").string();
  const std::string cluster = (kExamples / "cluster-cpu4.yaml").string();
  const auto error = [&](std::vector<std::string> args) -> std::string {
    try {
      run(std::move(args));
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error({"--profile", profile, "--cluster", cluster, "-s", "pipedream", "--slices", "4"})
                .find("--slices does not apply to schedule pipedream"),
            std::string::npos);
  EXPECT_NE(error({"--profile", profile, "--cluster", cluster, "-s", "1f1b", "--seed", "3"})
                .find("--seed does not apply"),
            std::string::npos);
  EXPECT_THROW(run({"--profile", profile, "--cluster", cluster, "-s", "umpipe", "--seed", "-1"}),
               CLI::ParseError);
  EXPECT_THROW(run({"--profile", profile, "--cluster", cluster, "--minibatch", "0"}),
               CLI::ParseError);
  const std::string before = read(profile);
  EXPECT_NE(error({"--profile", profile, "--cluster", cluster, "-o", profile})
                .find("is an input of this command"),
            std::string::npos);
  EXPECT_EQ(read(profile), before);
  EXPECT_NE(error({"--profile", profile, "--cluster", cluster, "-o",
                   std::filesystem::temp_directory_path().string()})
                .find("is a directory"),
            std::string::npos);
  // Values finite one by one whose sum is not.
  const auto big = output_.string() + ".json";
  {
    std::ofstream out(big);
    out << R"({"minibatch": 8, "layers": [)";
    for (int i = 0; i < 4; ++i) {
      out << (i ? "," : "") << R"({"forward_ms": 6e299, "backward_ms": 1, "backward_weight_ms": 0,
          "activation_bytes": 1, "parameter_bytes": 1, "memory_bytes": 1})";
    }
    out << "]}";
  }
  const std::string overflow = error({"--profile", big, "--cluster", cluster, "-s", "1f1b"});
  std::filesystem::remove(big);
  EXPECT_NE(overflow.find("layers[1].forward_ms: 6e+299: the sum over layers overflows"),
            std::string::npos)
      << overflow;
}

}  // namespace
}  // namespace tandem::apps
