#include "train/segment.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/dataset_source.hpp"
#include "models/model.hpp"
#include "train/config.hpp"
#include "train/job_plan.hpp"
#include "train/lr_schedule.hpp"
#include "train/session.hpp"
#include "train/train_data.hpp"

namespace tandem::train {
namespace {

// Two stages on the CPU, with momentum (an optimizer state to hand over).
const char* kTwoStages = R"(model: {name: mlp, widths: [8, 32, 16, 3]}
data: {kind: teacher, samples: 256, seed: 2, hidden: 8}
train:
  minibatch: 8
  steps: 6
  optimizer: {kind: sgd, lr: 0.05, momentum: 0.9}
  seed: 5
pipeline:
  schedule: 1f1b
  slices: 2
  stages:
    - {layers: "0-1"}
    - {layers: "2"}
)";

std::vector<std::byte> bytes(const std::string& text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

TEST(SegmentTest, RanMinibatchesTakesADecimalCountWithinTheSegment) {
  EXPECT_EQ(ran_minibatches(bytes("0"), 10), 0);
  EXPECT_EQ(ran_minibatches(bytes("7"), 10), 7);
  EXPECT_EQ(ran_minibatches(bytes("10"), 10), 10);
}

TEST(SegmentTest, RanMinibatchesRefusesAMalformedCount) {
  for (const char* text : {"", "11", "-1", "7x", " 7", "seven", "99999999999999999999"}) {
    try {
      (void)ran_minibatches(bytes(text), 10);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("malformed count"), std::string::npos) << what;
      EXPECT_NE(what.find("expected 0 to 10"), std::string::npos) << what;
    }
  }
}

// What Session::run builds for one segment of the whole run.
actors::PipelineSpec whole_run(const Config& job, const models::Model& model,
                               const TrainData& data) {
  actors::PipelineSpec spec;
  spec.model = &model;
  spec.plan = training_plan(job, model.num_layers(), job.train.steps);
  spec.optimizer = job.train.optimizer;
  spec.seed = job.train.seed;
  spec.initial_params = model.init_params(job.train.seed);
  spec.data = actors::dataset_source(data.train, model, job.train.minibatch, job.train.seed);
  spec.lr_at = [t = job.train](int64_t round) {
    return scheduled_lr(t.lr_schedule, t.optimizer.lr, round, t.steps);
  };
  return spec;
}

TEST(SegmentTest, OneProcessReturnsEveryStagesStateAsSessionTrainsIt) {
  const Config job = parse_config(kTwoStages, "segment.yaml");
  const models::Model model = models::Model::build(job.model);
  const TrainData data = load_train_data(job, model);
  std::vector<bool> running;  // what on_running was told: a pipeline, then none
  const SegmentResult r =
      run_segment(whole_run(job, model, data),
                  {.on_running = [&](actors::Pipeline* p) { running.push_back(p != nullptr); }});
  EXPECT_EQ(running, (std::vector<bool>{true, false}));
  EXPECT_EQ(r.pipeline.minibatches, 6);
  EXPECT_EQ(r.pipeline.stages.size(), 2u);
  ASSERT_EQ(r.states.size(), 2u);
  EXPECT_EQ(r.states[0].stage, 0);
  EXPECT_EQ(r.states[1].stage, 1);
  for (const StageState& st : r.states) {
    EXPECT_EQ(st.optimizer.steps, 6) << "stage " << st.stage;  // one update round per minibatch
    EXPECT_FALSE(st.optimizer.state.empty()) << "stage " << st.stage;  // momentum
  }

  // The stages' weights are the model Session trains with the same job, weight for weight.
  Session session(job);
  (void)session.run();
  models::ParamSet gathered;
  for (int64_t i = 0; i < session.params().size(); ++i) {
    const std::string& name = session.params().name(i);
    const StageState& owner = r.states[r.states[0].latest.contains(name) ? 0 : 1];
    ASSERT_TRUE(owner.latest.contains(name)) << name;
    gathered.add(name, owner.latest.at(name));
  }
  EXPECT_EQ(gathered.fingerprint(), session.params().fingerprint());
}

TEST(SegmentTest, WithoutGatherStateOnlyStatisticsComeBack) {
  const Config job = parse_config(kTwoStages, "segment.yaml");
  const models::Model model = models::Model::build(job.model);
  const TrainData data = load_train_data(job, model);
  const SegmentResult r = run_segment(whole_run(job, model, data), {.gather_state = false});
  EXPECT_TRUE(r.states.empty());
  EXPECT_EQ(r.pipeline.minibatches, 6);
  EXPECT_EQ(r.pipeline.stages.size(), 2u);
}

}  // namespace
}  // namespace tandem::train
