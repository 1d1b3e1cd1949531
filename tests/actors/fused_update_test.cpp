// Plain SGD fused into a stage's backward: the update is written inside the weight-gradient
// GEMMs where a round has one backward and nothing else needs the weights. It must train what
// the separate update trains (to rounding), happen exactly where allowed, and never change
// weights that someone else holds.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "models/train_step.hpp"
#include "pipeline_harness.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::Op;
using schedules::ScheduleKind;

models::OptimizerSpec plain_sgd() {
  models::OptimizerSpec o;
  o.kind = "sgd";
  o.lr = 0.05;
  return o;
}

schedules::ScheduleParams params_of(ScheduleKind kind, int stages, int slices,
                                    std::int64_t minibatches) {
  schedules::ScheduleParams p;
  p.kind = kind;
  p.stages = stages;
  p.slices = slices;
  p.minibatch_size = 8;
  p.minibatches = minibatches;
  return p;
}

struct Outcome {
  models::ParamSet params;
  std::vector<double> losses;
  std::map<int, int> fused_steps, steps;  // by stage: STEPs whose update the backward wrote
};

Outcome run(const models::Model& model, const schedules::ScheduleParams& p, bool fuse,
            bool threads = false) {
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.optimizer = plain_sgd();
  spec.seed = 5;
  spec.fuse_updates = fuse;
  spec.data = [&model](std::int64_t b) { return make_minibatch(model, 8, b); };
  Outcome out;
  std::mutex mu;
  spec.observer = [&](const StageEvent& e) {
    if (e.action.op != Op::STEP) return;
    std::lock_guard lock(mu);
    ++out.steps[e.stage];
    if (e.grads == nullptr) ++out.fused_steps[e.stage];
  };
  Pipeline pipeline(std::move(spec), make_scheduler(threads));
  out.losses = pipeline.run().losses;
  out.params = pipeline.params();
  return out;
}

// A one-stage run is the single-device fused step, bit for bit, every update fused.
TEST(FusedUpdate, OneStageRunIsTheFusedSingleDeviceStep) {
  const models::Model model = tiny_gpt();
  const Outcome fused = run(model, params_of(ScheduleKind::one_f_one_b, 1, 1, 6), true);
  EXPECT_EQ(fused.fused_steps.at(0), 6);

  models::ParamSet params = model.init_params(5);
  auto opt = models::make_optimizer(plain_sgd());
  for (std::int64_t b = 0; b < 6; ++b) {
    const MinibatchData d = make_minibatch(model, 8, b);
    ASSERT_EQ(d.pieces.size(), 1u);
    const models::StepOutput out = models::train_step(model, params, *opt, d.pieces[0].inputs,
                                                      d.pieces[0].targets, step_seed(5, b));
    EXPECT_TRUE(out.grads.empty()) << "the reference did not fuse";
    EXPECT_FLOAT_EQ(static_cast<float>(fused.losses[static_cast<std::size_t>(b)]), out.loss);
  }
  EXPECT_EQ(opt->steps(), 6);
  EXPECT_LT(max_relative_error(fused.params, params), 1e-6);
}

// Where a round has several backwards (slices) or the weights are still needed (PipeDream's
// earlier stages keep the version for minibatches in flight), nothing fuses; PipeDream's last
// stage (no warm-up) fuses every update. Fused or not, the training is the same to rounding.
TEST(FusedUpdate, FusesExactlyWhereARoundHasOneBackwardAndNoOtherUser) {
  const models::Model model = tiny_mlp();
  struct Case {
    schedules::ScheduleParams p;
    std::map<int, int> fused;  // stage -> fused STEPs expected
  };
  const std::vector<Case> cases = {
      {params_of(ScheduleKind::one_f_one_b, 1, 2, 5), {}},
      {params_of(ScheduleKind::pipedream, 3, 1, 7), {{2, 7}}},
      {params_of(ScheduleKind::gpipe, 2, 1, 5), {{0, 5}, {1, 5}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(schedules::to_string(c.p.kind)) + " stages " +
                 std::to_string(c.p.stages) + " slices " + std::to_string(c.p.slices));
    const Outcome fused = run(model, c.p, true, true);
    const Outcome separate = run(model, c.p, false, true);
    EXPECT_EQ(fused.fused_steps, c.fused);
    EXPECT_TRUE(separate.fused_steps.empty());
    EXPECT_EQ(fused.steps, separate.steps);
    EXPECT_LT(max_relative_error(fused.params, separate.params), 1e-5);
    ASSERT_EQ(fused.losses.size(), separate.losses.size());
    for (std::size_t i = 0; i < fused.losses.size(); ++i) {
      EXPECT_NEAR(fused.losses[i], separate.losses[i], 1e-5);
    }
  }
}

// An observer that keeps the weights published at a STEP (the trainer's evaluation snapshots
// do) holds them unchanged while training goes on: the next update is not written in place.
TEST(FusedUpdate, NeverWritesWeightsSomeoneHolds) {
  const models::Model model = tiny_mlp();
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, params_of(ScheduleKind::one_f_one_b, 1, 1, 6));
  spec.optimizer = plain_sgd();
  spec.seed = 5;
  spec.data = [&model](std::int64_t b) { return make_minibatch(model, 8, b); };
  models::ParamSet held;
  std::vector<float> at_publish;
  spec.observer = [&](const StageEvent& e) {
    if (e.action.op == Op::STEP && e.action.minibatch == 2) {
      held = *e.weights;  // shares the tensors' storage, as a snapshot does
      at_publish = held[0].to_float_vector();
    }
  };
  Pipeline pipeline(std::move(spec), make_scheduler(false));
  (void)pipeline.run();
  ASSERT_FALSE(held.empty());
  EXPECT_EQ(held[0].to_float_vector(), at_publish);
  EXPECT_NE(pipeline.params()[0].to_float_vector(), at_publish);
}

}  // namespace
}  // namespace tandem::actors
