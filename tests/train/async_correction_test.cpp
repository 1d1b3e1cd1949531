// pipeline.async_correction through a whole session: the key is read and refused where it does
// not apply, corrected PipeDream pipelines learn, and their checkpoints resume bit for bit
// (the state holds the master weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/step_seed.hpp"
#include "models/delayed_training.hpp"
#include "models/model_spec.hpp"
#include "runtime/scheduler.hpp"
#include "schedules/plan.hpp"
#include "schedules/weight_versions.hpp"
#include "temp_dir.hpp"
#include "train/config.hpp"
#include "train/config_error.hpp"
#include "train/session.hpp"

namespace tandem::apps {
namespace {

using testing::TempDir;

const char* kGpt =
    R"(model: {name: gpt, layers: 2, d_model: 16, heads: 2, seq_len: 8, vocab: 8}
data: {kind: markov-text, vocab: 8, samples: 256, seed: 1}
train:
  minibatch: 8
  steps: 8
  optimizer: {kind: adamw, lr: 1.0e-2}
  lr_schedule: {kind: cosine, warmup_steps: 2}
  seed: 3
  log_every: 1
)";

// Line 10 of the config is "pipeline:", line 12 the correction.
std::string with_pipeline(const std::string& schedule, const std::string& correction,
                          const char* base = kGpt) {
  std::string extra = schedule == "2bw" ? "  slices: 4\n" : "  slices: 1\n";
  return std::string(base) + "pipeline:\n  schedule: " + schedule +
         "\n  async_correction: " + correction + "\n" + extra +
         "  stages:\n    - {layers: \"0-1\"}\n    - {layers: \"2\"}\n" +
         "    - {layers: \"3-4\"}\n";
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_config_error(const std::string& yaml, int line, const std::string& words) {
  try {
    const train::Config config = train::parse_config(yaml, "test.yaml");
    train::at_config(config, [&] { train::Session session(config); });
    ADD_FAILURE() << "no error for " << words;
  } catch (const train::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test.yaml:" + std::to_string(line) + ":"), std::string::npos) << msg;
    EXPECT_NE(msg.find("async_correction"), std::string::npos) << msg;
    EXPECT_NE(msg.find(words), std::string::npos) << msg;
  }
}

TEST(AsyncCorrectionConfig, FlushSchedulesAndUnknownNamesAreRefused) {
  expect_config_error(with_pipeline("1f1b", "weight-prediction"), 12, "1f1b flushes");
  expect_config_error(with_pipeline("pipedream", "lookahead"), 12, "unknown async correction");
  std::string sgd = kGpt;
  sgd.replace(sgd.find("{kind: adamw, lr: 1.0e-2}"), 25, "{kind: sgd, lr: 1.0e-2}");
  expect_config_error(with_pipeline("pipedream", "nesterov", sgd.c_str()), 12, "momentum");
  const train::Config ok = train::parse_config(with_pipeline("pipedream", "nesterov"), "test.yaml");
  EXPECT_EQ(ok.pipeline->async_correction, models::AsyncCorrection::nesterov);
}

class CorrectedResume : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

// A checkpoint of a corrected run resumes bit for bit, and the correction changes the run.
TEST_P(CorrectedResume, CheckpointsAndResumeEqualOneRun) {
  const auto [schedule, correction] = GetParam();
  TempDir dir;
  const train::Config config =
      train::parse_config(with_pipeline(schedule, correction), "test.yaml");
  train::Session reference(config);
  const train::TrainSummary all = reference.run();
  ASSERT_EQ(all.losses.size(), 8u);
  train::Session uncorrected(train::parse_config(with_pipeline(schedule, "none"), "test.yaml"));
  EXPECT_NE(uncorrected.run().params_fingerprint, all.params_fingerprint);

  train::Session first(
      config, train::SessionOptions{
                  .checkpoint_dir = dir.path(), .checkpoint_every = 3, .checkpoint_keep = 0});
  const train::TrainSummary a = first.run();
  ASSERT_EQ(a.checkpoints.size(), 3u);
  EXPECT_TRUE(bit_identical(a.losses, all.losses));
  train::Session second(config, train::SessionOptions{.resume = a.checkpoints.front()});
  EXPECT_EQ(second.first_step(), 3);
  const train::TrainSummary b = second.run();
  EXPECT_TRUE(
      bit_identical(b.losses, std::vector<float>(all.losses.begin() + 3, all.losses.end())));
  EXPECT_EQ(b.params_fingerprint, all.params_fingerprint);
}

INSTANTIATE_TEST_SUITE_P(Corrections, CorrectedResume,
                         ::testing::Values(std::pair{"pipedream", "weight-prediction"},
                                           std::pair{"pipedream", "nesterov"},
                                           std::pair{"pipedream-vsync", "weight-prediction"},
                                           std::pair{"2bw", "nesterov"}),
                         [](const auto& param_info) {
                           std::string name =
                               std::string(param_info.param.first) + "_" + param_info.param.second;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

double mean(const std::vector<float>& v, std::size_t begin, std::size_t end) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(begin),
                         v.begin() + static_cast<std::ptrdiff_t>(end), 0.0) /
         static_cast<double>(end - begin);
}

class CorrectedPipeDream : public ::testing::TestWithParam<const char*> {};

// Four stages (delays 3, 2, 1, 0) learn the Markov text with each correction.
TEST_P(CorrectedPipeDream, LossFalls) {
  const std::string yaml =
      std::string(R"(model: {name: gpt, layers: 2, d_model: 32, heads: 2, seq_len: 16, vocab: 16}
data: {kind: markov-text, vocab: 8, samples: 2048, seed: 1}
train:
  minibatch: 16
  steps: 120
  optimizer: {kind: adamw, lr: 3.0e-3}
  lr_schedule: {kind: constant, warmup_steps: 10}
  seed: 0
  log_every: 1000
pipeline:
  schedule: pipedream
  async_correction: )") +
      GetParam() +
      "\n  stages:\n    - {layers: \"0\"}\n    - {layers: \"1\"}\n    - {layers: \"2\"}\n"
      "    - {layers: \"3-4\"}\n";
  train::Session trainer(train::parse_config(yaml, "test.yaml"));
  const train::TrainSummary s = trainer.run();
  ASSERT_EQ(s.losses.size(), 120u);
  for (const float l : s.losses) ASSERT_TRUE(std::isfinite(l)) << l;
  EXPECT_LT(mean(s.losses, 100, 120), 0.75 * mean(s.losses, 0, 10));
}

INSTANTIATE_TEST_SUITE_P(Corrections, CorrectedPipeDream,
                         ::testing::Values("none", "weight-prediction", "nesterov"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

Tensor ids(const Shape& shape, std::int64_t vocab, std::int64_t seed) {
  Tensor t = Tensor::empty(shape, DType::i32);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7919 + seed * 104729) % vocab);
  return t;
}

class CorrectedPipeline : public ::testing::TestWithParam<schedules::ScheduleKind> {};

// The runtime's corrected schedule is the delay harness with the schedule's delays: the
// correction changes what versions hold, never which version a minibatch reads.
TEST_P(CorrectedPipeline, EqualsTheDelayHarness) {
  const models::Model model = models::Model::build(models::gpt_spec(2, 16, 2, 6, 11));
  const models::ParamSet init = model.init_params(3);
  constexpr std::int64_t kSteps = 12, kBatch = 4;
  const auto x = [&](std::int64_t b) { return ids(model.input_shape(kBatch), 11, 2 * b + 1); };
  const auto y = [&](std::int64_t b) { return ids(model.target_shape(kBatch), 11, 2 * b + 2); };
  schedules::ScheduleParams sp;
  sp.kind = GetParam();
  sp.slices = 1;  // whole minibatches, as the harness takes them
  sp.minibatch_size = kBatch;
  sp.minibatches = kSteps;
  std::vector<schedules::StagePlan> stages(3);
  stages[0].layers = {0, 2};
  stages[1].layers = {2, 3};
  stages[2].layers = {3, 5};
  const schedules::Plan plan = schedules::Plan::make(stages, sp);

  actors::PipelineSpec spec;
  spec.model = &model;
  spec.plan = plan;
  spec.optimizer = {.kind = "adamw", .lr = 1e-2};
  spec.seed = 5;
  spec.initial_params = init.clone();
  spec.data = [&](std::int64_t b) { return actors::MinibatchData::whole(x(b), y(b)); };
  spec.async_correction = models::AsyncCorrection::weight_prediction;
  actors::Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
  const actors::PipelineResult r = pipeline.run();
  ASSERT_EQ(r.losses.size(), static_cast<std::size_t>(kSteps));

  models::DelayedTrainingSpec ds;
  ds.model = &model;
  for (int s = 0; s < 3; ++s) {
    const auto& l = plan.stages[static_cast<std::size_t>(s)].layers;
    ds.stages.push_back({l.begin, l.end, schedules::update_delay(plan.schedule, s)});
  }
  ds.optimizer = {.kind = "adamw", .lr = 1e-2};
  ds.correction = models::AsyncCorrection::weight_prediction;
  models::DelayedTrainer harness(ds, init);
  for (std::int64_t b = 0; b < kSteps; ++b) {
    const float loss = harness.step(x(b), y(b), actors::step_seed(5, b)).loss;
    // Up to the rounding of the loss's sum (train_step and the last stage add in other orders).
    EXPECT_NEAR(r.losses[static_cast<std::size_t>(b)], loss, 1e-6) << b;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, CorrectedPipeline,
                         ::testing::Values(schedules::ScheduleKind::pipedream,
                                           schedules::ScheduleKind::pipedream_vsync),
                         [](const auto& param_info) {
                           std::string name(schedules::to_string(param_info.param));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tandem::apps
