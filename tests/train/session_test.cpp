#include "train/session.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/trainer_report.hpp"
#include "temp_dir.hpp"
#include "train/config.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;

const char* kMlp = R"(model: {name: mlp, widths: [8, 32, 3]}
data: {kind: teacher, samples: 512, seed: 2, hidden: 8}
train:
  minibatch: 16
  steps: 12
  optimizer: {kind: sgd, lr: 0.05, momentum: 0.9}
  seed: 5
  log_every: 5
)";

const char* kGpt =
    R"(model: {name: gpt, layers: 1, d_model: 16, heads: 2, seq_len: 8, vocab: 8, dropout: 0.1}
data: {kind: markov-text, vocab: 8, samples: 64, seed: 1}
train:
  minibatch: 4
  steps: 6
  optimizer: {kind: adamw, lr: 1.0e-2}
  seed: 1
  log_every: 2
  eval: {every: 3, samples: 8}
)";

const char* kVgg =
    R"(model: {name: vgg16, width_mult: 0.03125, in_channels: 1, image_size: 32, classes: 4}
data: {kind: shapes, samples: 64, noise: 0.2}
train: {minibatch: 4, steps: 3, optimizer: {kind: sgd, lr: 0.01, momentum: 0.9}, seed: 3}
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

using testing::TempDir;

std::vector<float> run_losses(const std::string& yaml) {
  train::Session trainer(train::parse_config(yaml, "test.yaml"));
  return trainer.run().losses;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(SessionTest, SameSeedGivesBitIdenticalLosses) {
  for (const char* yaml : {kMlp, kGpt, kVgg}) {
    const std::vector<float> a = run_losses(yaml);
    const std::vector<float> b = run_losses(yaml);
    ASSERT_EQ(a.size(), static_cast<size_t>(train::parse_config(yaml, "t").train.steps));
    EXPECT_TRUE(bit_identical(a, b)) << yaml;
  }
  // Another train.seed (initialisation, minibatch order, dropout) changes the trajectory.
  EXPECT_FALSE(bit_identical(run_losses(kMlp), run_losses(replace(kMlp, "seed: 5", "seed: 6"))));
  EXPECT_FALSE(bit_identical(run_losses(kGpt),
                             run_losses(replace(kGpt, "seed: 1\n  log", "seed: 2\n  log"))));
}

TEST(SessionTest, LearningRateSchedules) {
  const train::LrSchedule constant{.kind = "constant", .warmup_steps = 4, .final_fraction = 0};
  EXPECT_DOUBLE_EQ(train::scheduled_lr(constant, 0.8, 0, 100), 0.2);  // warm-up: (step + 1) / 4
  EXPECT_DOUBLE_EQ(train::scheduled_lr(constant, 0.8, 3, 100), 0.8);
  EXPECT_DOUBLE_EQ(train::scheduled_lr(constant, 0.8, 99, 100), 0.8);
  const train::LrSchedule cosine{.kind = "cosine", .warmup_steps = 0, .final_fraction = 0.1};
  EXPECT_DOUBLE_EQ(train::scheduled_lr(cosine, 1.0, 0, 10), 1.0);
  EXPECT_NEAR(train::scheduled_lr(cosine, 1.0, 5, 10), 0.55, 1e-12);  // half way: mean of the ends
  EXPECT_NEAR(train::scheduled_lr(cosine, 1.0, 9, 10),
              0.1 + 0.45 * (1 + std::cos(0.9 * std::numbers::pi)), 1e-12);
  const train::LrSchedule linear{.kind = "linear", .warmup_steps = 2, .final_fraction = 0.0};
  EXPECT_DOUBLE_EQ(train::scheduled_lr(linear, 1.0, 1, 12), 1.0);
  EXPECT_DOUBLE_EQ(train::scheduled_lr(linear, 1.0, 2, 12), 1.0);  // decay over steps 2..11
  EXPECT_NEAR(train::scheduled_lr(linear, 1.0, 7, 12), 0.5, 1e-12);
  EXPECT_NEAR(train::scheduled_lr(linear, 1.0, 11, 12), 0.1, 1e-12);

  // The trainer applies it: the logged lr is the schedule's at the logged step.
  train::Session trainer(
      train::parse_config(
          replace(kMlp, "  seed: 5\n",
                  "  seed: 5\n  lr_schedule: {kind: linear, final_fraction: 0.5}\n"),
          "test.yaml"),
      train::SessionOptions{.steps = 11});
  std::vector<train::StepRecord> records;
  trainer.run([&](const train::StepRecord& r) { records.push_back(r); });
  ASSERT_EQ(records.size(), 3u);  // 5, 10, 11
  EXPECT_NEAR(records[0].lr, 0.05 * (1 - 0.5 * 4 / 11.0), 1e-12);
  EXPECT_NEAR(records[2].lr, 0.05 * (1 - 0.5 * 10 / 11.0), 1e-12);
}

TEST(SessionTest, RecordsEveryLogWindowAndEvaluates) {
  train::Session trainer(train::parse_config(kGpt, "test.yaml"));
  std::vector<train::StepRecord> records;
  const train::TrainSummary s =
      trainer.run([&](const train::StepRecord& r) { records.push_back(r); });
  // Log points at 2, 4, 6 and evaluations at 3 and 6.
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].step, 2);
  EXPECT_EQ(records[1].step, 3);
  EXPECT_EQ(records[2].step, 4);
  EXPECT_EQ(records[3].step, 6);
  EXPECT_FALSE(records[0].eval.has_value());
  ASSERT_TRUE(records[1].eval.has_value());
  EXPECT_EQ(records[1].eval->samples, 8);
  EXPECT_EQ(records[1].eval->predictions, 8 * 8);
  // The window mean is over the steps since the previous record.
  EXPECT_FLOAT_EQ(static_cast<float>(records[0].loss), (s.losses[0] + s.losses[1]) / 2);
  EXPECT_FLOAT_EQ(static_cast<float>(records[1].loss), s.losses[2]);
  EXPECT_FALSE(records[0].accuracy.has_value());  // language model: no accuracy
  ASSERT_TRUE(s.eval.has_value());
  EXPECT_DOUBLE_EQ(s.eval->loss, records[3].eval->loss);
  ASSERT_TRUE(s.entropy_rate.has_value());
  EXPECT_GT(*s.entropy_rate, 0.0);
  EXPECT_DOUBLE_EQ(s.final_loss, records[3].loss);
  // Evaluation is a pure function of the parameters.
  EXPECT_DOUBLE_EQ(trainer.evaluate().loss, s.eval->loss);
}

TEST(SessionTest, ClassificationReportsAccuracy) {
  train::Session trainer(train::parse_config(kMlp, "test.yaml"), train::SessionOptions{.steps = 7});
  std::vector<train::StepRecord> records;
  const train::TrainSummary s =
      trainer.run([&](const train::StepRecord& r) { records.push_back(r); });
  EXPECT_EQ(s.steps, 7);
  ASSERT_EQ(records.size(), 2u);  // 5 and the last step, 7
  ASSERT_TRUE(records[1].accuracy.has_value());
  EXPECT_GE(*records[1].accuracy, 0.0);
  EXPECT_LE(*records[1].accuracy, 1.0);
  EXPECT_FALSE(s.eval.has_value());
  EXPECT_FALSE(s.entropy_rate.has_value());
}

void expect_config_error(const std::string& yaml, int line, const std::string& key) {
  try {
    // The CLI's mapping of a job's error to the config line of its key (at_config).
    const train::Config config = train::parse_config(yaml, "test.yaml");
    train::at_config(config, [&] { train::Session session(config); });
    ADD_FAILURE() << "no error for " << key;
  } catch (const train::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test.yaml:" + std::to_string(line) + ":"), std::string::npos) << msg;
    EXPECT_NE(msg.find(key), std::string::npos) << msg;
  }
}

// One training path: a config without a pipeline section is a one-stage pipeline on the CPU,
// and a one-stage pipeline section must still hold every layer on a device with data.
TEST(SessionTest, OneDeviceIsAOneStagePipeline) {
  train::Session plain(train::parse_config(kMlp, "test.yaml"), train::SessionOptions{.steps = 1});
  ASSERT_EQ(plain.plan().stages.size(), 1u);
  EXPECT_EQ(plain.plan().stages[0].layers.begin, 0);
  EXPECT_EQ(plain.plan().stages[0].layers.end, plain.model().num_layers());
  EXPECT_EQ(plain.plan().stages[0].replicas.size(), 1u);
  EXPECT_EQ(plain.plan().stages[0].replicas[0].device, "cpu");
  const train::TrainSummary s = plain.run();
  EXPECT_EQ(s.steps, 1);
  ASSERT_EQ(s.stages.size(), 1u);
  EXPECT_GT(s.stages[0].actions, 0);
  expect_config_error(std::string(kMlp) + "pipeline:\n  stages:\n    - {device: sim}\n", 11,
                      "pipeline.stages[0].device");
  // One stage holding every layer is the same run.
  train::Session one(
      train::parse_config(
          std::string(kMlp) + "pipeline:\n  stages:\n    - {layers: \"0-1\", device: cpu}\n",
          "test.yaml"),
      train::SessionOptions{.steps = 3});
  train::Session none(train::parse_config(kMlp, "test.yaml"), train::SessionOptions{.steps = 3});
  EXPECT_TRUE(bit_identical(one.run().losses, none.run().losses));
}

TEST(SessionTest, DataThatDoesNotFitTheModelIsAConfigError) {
  TempDir dir;
  // 2x3 images in IDX files: 6 pixels per sample, but the MLP takes 8 inputs.
  std::string images{0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3};
  images += std::string(12, '\x10');
  const fs::path img = dir.write("img.idx", images);
  const fs::path lab = dir.write("lab.idx", std::string{0, 0, 8, 1, 0, 0, 0, 2, 1, 2});
  const std::string mnist =
      replace(kMlp, "{kind: teacher, samples: 512, seed: 2, hidden: 8}",
              "{kind: mnist, images: " + img.string() + ", labels: " + lab.string() + "}");
  expect_config_error(mnist, 2, "gives samples [6]");
  expect_config_error(replace(replace(mnist, "widths: [8, 32, 3]", "widths: [6, 32, 3]"),
                              "log_every: 5", "log_every: 5\n  eval: {samples: 2}"),
                      3, "train.eval");
}

TEST(TrainCommandTest, WritesJsonLinesAndSummary) {
  TempDir dir;
  const fs::path config = dir.write("gpt.yaml", kGpt);
  const fs::path metrics = dir.path() / "metrics.jsonl";
  std::ostringstream out;
  const train::TrainSummary s = run_train_command(
      TrainCommand{.config = config, .metrics_json = metrics, .steps = 4, .quiet = false}, out);
  EXPECT_EQ(s.steps, 4);
  std::ifstream in(metrics);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);  // steps 2, 3 (eval), 4 (last)
  EXPECT_EQ(lines[0]["step"], 2);
  EXPECT_EQ(lines[2]["step"], 4);
  EXPECT_EQ(lines[2]["steps"], 4);
  for (const auto& j : lines) {
    for (const char* key : {"loss", "samples_per_s", "elapsed_s", "eta_s", "lr"}) {
      EXPECT_TRUE(j.contains(key)) << key << " in " << j.dump();
    }
    EXPECT_FALSE(j.contains("accuracy"));
  }
  EXPECT_TRUE(lines[1].contains("eval_loss"));
  EXPECT_DOUBLE_EQ(lines[2]["eval_loss"].get<double>(), s.eval->loss);
  const std::string text = out.str();
  EXPECT_NE(text.find("step 2/4  loss"), std::string::npos) << text;
  EXPECT_NE(text.find("samples/s"), std::string::npos) << text;
  EXPECT_NE(text.find("eta"), std::string::npos) << text;
  EXPECT_NE(text.find("entropy rate"), std::string::npos) << text;
  EXPECT_NE(text.find("gap"), std::string::npos) << text;
}

TEST(TrainCommandTest, QuietPrintsOnlyTheSummaryAndCliParses) {
  TempDir dir;
  const fs::path config = dir.write("mlp.yaml", kMlp);
  std::ostringstream out;
  run_train_command(TrainCommand{.config = config, .quiet = true}, out);
  EXPECT_EQ(out.str().find("step "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("final train loss"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("accuracy"), std::string::npos) << out.str();

  CLI::App app;
  add_train_command(app);
  const fs::path metrics = dir.path() / "m.jsonl";
  // CLI11 takes the arguments reversed: train CONFIG --steps 3 --metrics-json FILE --quiet.
  std::vector<std::string> args{"--quiet", metrics.string(), "--metrics-json", "3",
                                "--steps", config.string(),  "train"};
  ::testing::internal::CaptureStdout();
  app.parse(args);
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(printed.find("trained"), std::string::npos) << printed;
  std::ifstream in(metrics);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 1);  // 3 steps, log_every 5: only the last step
  EXPECT_THROW(app.parse(std::vector<std::string>{"0", "--steps", config.string(), "train"}),
               CLI::ValidationError);
}

}  // namespace
}  // namespace tandem::apps
