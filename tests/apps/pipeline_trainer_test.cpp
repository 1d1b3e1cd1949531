#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "apps/commands.hpp"
#include "apps/default_config.hpp"
#include "apps/trainer_report.hpp"
#include "models/kernels/cpu/bf16_gemm.hpp"
#include "temp_dir.hpp"
#include "train/config.hpp"
#include "train/job_plan.hpp"
#include "train/session.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;

fs::path source_path(const std::string& relative) {
  return fs::path(TANDEM_SOURCE_DIR) / relative;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every (stage, replica) of the plan appears once in the table's stats, in order.
void expect_every_replica(const schedules::Plan& plan, const train::TrainSummary& s) {
  std::vector<std::pair<int, int>> expected, got;
  for (size_t st = 0; st < plan.stages.size(); ++st) {
    for (size_t r = 0; r < plan.stages[st].replicas.size(); ++r) {
      expected.emplace_back(static_cast<int>(st), static_cast<int>(r));
    }
  }
  for (const auto& st : s.stages) got.emplace_back(st.stage, st.replica);
  EXPECT_EQ(got, expected);
  const std::string table = format_stage_table(s);
  // A header and one row per replica.
  EXPECT_EQ(static_cast<size_t>(std::count(table.begin(), table.end(), '\n')), expected.size() + 1)
      << table;
  EXPECT_NE(table.find("busy s"), std::string::npos) << table;
  EXPECT_NE(table.find("idle s"), std::string::npos) << table;
}

TEST(DefaultConfigTest, EmbeddedTextIsTheShippedFile) {
  EXPECT_EQ(std::string(default_config()), read_file(source_path("configs/default.yaml")));
  const train::Config c = train::parse_config(std::string(default_config()), kDefaultConfigName);
  ASSERT_TRUE(train::is_pipeline(c));
  EXPECT_EQ(c.pipeline->schedule, "pipedream");
  EXPECT_EQ(c.pipeline->stages.size(), 4u);
  EXPECT_EQ(c.model.name, "gpt");
}

TEST(SessionTest, ShippedPipelineConfigsRun) {
  for (const char* name : {"configs/default.yaml", "configs/gpt-pipeline-1f1b.yaml",
                           "configs/mlp-pipeline-pipedream.yaml"}) {
    SCOPED_TRACE(name);
    const train::Config config = train::load_config(source_path(name));
    ASSERT_TRUE(train::is_pipeline(config));
    train::Session trainer(config, train::SessionOptions{.steps = 3});
    std::vector<train::StepRecord> records;
    const train::TrainSummary s =
        trainer.run([&](const train::StepRecord& r) { records.push_back(r); });
    ASSERT_EQ(s.losses.size(), 3u);
    for (float l : s.losses) EXPECT_TRUE(std::isfinite(l)) << l;
    EXPECT_TRUE(std::isfinite(s.final_loss));
    ASSERT_FALSE(records.empty());
    EXPECT_EQ(records.back().step, 3);
    EXPECT_EQ(records.back().steps, 3);
    EXPECT_EQ(s.eval.has_value(), config.train.eval.has_value());
    expect_every_replica(trainer.plan(), s);
    for (const auto& st : s.stages) {
      EXPECT_TRUE(st.finished);
      EXPECT_GT(st.actions, 0);
      EXPECT_GE(st.peak_versions, 1u);
    }
  }
}

// The whole default run in bf16 (products, and the tensors between its 4 stages) ends within 1%
// of the f32 run's held-out loss.
TEST(DefaultConfigTest, TrainedInBf16ItEndsWithinOnePercentOfF32) {
  if (!models::cpu::bf16_gemm_native()) GTEST_SKIP() << "no AVX512-BF16 or AMX: f32 products";
  std::string bf16(default_config());
  bf16.replace(bf16.find("train:\n"), 7, "train:\n  precision: bf16\n");
  double held_out[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    train::Session trainer(
        train::parse_config(i == 0 ? std::string(default_config()) : bf16, kDefaultConfigName));
    const train::TrainSummary s = trainer.run();
    ASSERT_TRUE(s.eval.has_value());
    held_out[i] = s.eval->loss;
  }
  EXPECT_NEAR(held_out[1], held_out[0], 0.01 * held_out[0]);
  EXPECT_NE(held_out[1], held_out[0]) << "the bf16 run computed in f32";
}

const char* kMlp = R"(model: {name: mlp, widths: [8, 32, 32, 32, 3]}
data: {kind: teacher, samples: 512, seed: 2, hidden: 8}
train:
  minibatch: 16
  steps: 6
  optimizer: {kind: adamw, lr: 1.0e-2}
  lr_schedule: {kind: cosine, warmup_steps: 2}
  seed: 5
  log_every: 4
)";

// A flush schedule runs the single-device trainer's steps: same initial weights, minibatches
// and learning rates, so the same losses up to rounding (slices sum in another order).
TEST(SessionTest, FlushScheduleFollowsTheSingleDeviceTrainer) {
  const train::Config single = train::parse_config(kMlp, "test.yaml");
  const train::Config piped =
      train::parse_config(std::string(kMlp) +
                              "pipeline:\n  schedule: 1f1b\n  slices: 4\n  stages:\n"
                              "    - {layers: \"0-1\"}\n    - {layers: \"2-3\"}\n",
                          "test.yaml");
  train::Session reference(single);
  const std::vector<float> expected = reference.run().losses;
  ASSERT_EQ(reference.plan().stages.size(), 1u);  // no pipeline section: one stage
  train::Session trainer(piped);
  const train::TrainSummary s = trainer.run();
  ASSERT_EQ(s.losses.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(s.losses[i], expected[i], 1e-4 * std::abs(expected[i])) << "step " << i;
  }
}

TEST(SessionTest, RecordsEveryLogWindowInOrder) {
  const train::Config c =
      train::parse_config(std::string(kMlp) +
                              "pipeline:\n  schedule: pipedream\n  stages:\n"
                              "    - {layers: \"0-1\", replicas: 2}\n    - {layers: \"2-3\"}\n",
                          "test.yaml");
  train::Session trainer(c, train::SessionOptions{.steps = 9});
  std::vector<train::StepRecord> records;
  const train::TrainSummary s =
      trainer.run([&](const train::StepRecord& r) { records.push_back(r); });
  ASSERT_EQ(records.size(), 3u);  // 4, 8 and the last, 9
  EXPECT_EQ(records[0].step, 4);
  EXPECT_EQ(records[1].step, 8);
  EXPECT_EQ(records[2].step, 9);
  // Each record's loss is its window's mean over the minibatch losses.
  double first = 0;
  for (size_t i = 0; i < 4; ++i) first += s.losses[i];
  EXPECT_NEAR(records[0].loss, first / 4, 1e-5);
  EXPECT_NEAR(records[2].loss, s.losses[8], 1e-5);
  for (const train::StepRecord& r : records) {
    ASSERT_TRUE(r.accuracy.has_value());
    EXPECT_GE(*r.accuracy, 0.0);
    EXPECT_LE(*r.accuracy, 1.0);
  }
  EXPECT_DOUBLE_EQ(s.final_loss, records.back().loss);
  expect_every_replica(trainer.plan(), s);
}

TEST(SessionTest, SimStagesAreAConfigError) {
  const train::Config c = train::parse_config(std::string(kMlp) +
                                                  "pipeline:\n  stages:\n    - {layers: \"0-1\"}\n"
                                                  "    - {layers: \"2-3\", device: sim}\n",
                                              "test.yaml");
  try {
    train::at_config(c, [&] { train::Session session(c); });
    ADD_FAILURE() << "no error for a sim stage";
  } catch (const train::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test.yaml:13:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pipeline.stages[1].device"), std::string::npos) << msg;
  }
}

using testing::TempDir;

TEST(PipelineTrainCommandTest, PrintsPlanProgressSummaryTableAndJsonLines) {
  TempDir dir;
  const fs::path metrics = dir.path() / "metrics.jsonl";
  std::ostringstream out;
  const train::TrainSummary s =
      run_train_command(TrainCommand{.config = source_path("configs/mlp-pipeline-pipedream.yaml"),
                                     .metrics_json = metrics,
                                     .steps = 5},
                        out);
  EXPECT_EQ(s.steps, 5);
  const std::string text = out.str();
  for (const char* part : {"pipeline: schedule pipedream, 3 stages: layers 0-1 | 2 | 3",
                           "replicas 2-1-1", "step 5/5  loss", "samples/s", "eta",
                           "final train loss", "held-out loss", "stage replica", "busy s"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << " not in:\n" << text;
  }
  std::ifstream in(metrics);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 1u);  // log_every 200: only the last step
  for (const char* key : {"step", "steps", "loss", "accuracy", "samples_per_s", "elapsed_s",
                          "eta_s", "lr", "eval_loss", "eval_accuracy"}) {
    EXPECT_TRUE(lines[0].contains(key)) << key << " in " << lines[0].dump();
  }
  EXPECT_EQ(lines[0]["step"], 5);
  // Per stage replica: the window's busy time and its share of the window.
  ASSERT_TRUE(lines[0].contains("stages")) << lines[0].dump();
  const auto& stages = lines[0]["stages"];
  ASSERT_EQ(stages.size(), 4u);  // replicas 2-1-1
  std::vector<std::pair<int, int>> ids;
  for (const auto& st : stages) {
    ids.emplace_back(st["stage"].get<int>(), st["replica"].get<int>());
    EXPECT_GT(st["busy_s"].get<double>(), 0.0) << st.dump();
    EXPECT_GE(st["busy"].get<double>(), 0.0) << st.dump();
    EXPECT_LE(st["busy"].get<double>(), 1.0) << st.dump();
  }
  EXPECT_EQ(ids, (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {2, 0}}));
}

TEST(PipelineTrainCommandTest, NoConfigRunsTheEmbeddedDefault) {
  CLI::App app;
  add_train_command(app);
  // CLI11 takes the arguments reversed: train --steps 2 --quiet.
  std::vector<std::string> args{"--quiet", "2", "--steps", "train"};
  ::testing::internal::CaptureStdout();
  app.parse(args);
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(printed.find("trained gpt("), std::string::npos) << printed;
  EXPECT_NE(printed.find("for 2 steps"), std::string::npos) << printed;
  EXPECT_NE(printed.find("stage replica"), std::string::npos) << printed;
}

}  // namespace
}  // namespace tandem::apps
