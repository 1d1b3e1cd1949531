// Global gradient-norm clipping: a flush pipeline clips by the whole model's norm, every stage's
// and replica's squares folded in the model's parameter order, so it ends with one device's
// weights and reports one device's norms; an asynchronous pipeline clips each stage by its own
// gradient's norm.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "models/grad_norm.hpp"
#include "pipeline_harness.hpp"
#include "runtime/scheduler.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::Op;
using schedules::ScheduleKind;

struct ClippedRun {
  models::ParamSet params;
  std::vector<double> norms;  // before clipping, per minibatch
  int clipped = 0;            // minibatches whose gradients were scaled down
};

// One device: the gradient of each minibatch, its norm, clipped, then the update.
ClippedRun one_device(const models::Model& model, const models::OptimizerSpec& opt,
                      std::uint64_t seed, std::int64_t minibatches,
                      const std::function<MinibatchData(std::int64_t)>& data, double clip) {
  ClippedRun out;
  out.params = model.init_params(seed);
  auto optimizer = models::make_optimizer(opt);
  optimizer->attach(model);
  const models::GradNormLayout layout(model);
  for (std::int64_t b = 0; b < minibatches; ++b) {
    models::ParamSet g = reference_grads(model, out.params, data(b), seed, b);
    const double norm = models::gradient_norm(models::cpu_kernels(), layout, g);
    const float c = models::clip_coefficient(norm, clip);
    out.clipped += c < 1.0f ? 1 : 0;
    models::scale_gradients(models::cpu_kernels(), layout, g, c);
    optimizer->step(out.params, g);
    out.norms.push_back(norm);
  }
  return out;
}

std::string printed(double norm) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", norm);
  return buf;
}

models::Model tied_gpt() {
  models::ModelSpec s = models::gpt_spec(5, 16, 2, 6, 11);
  s.dropout = 0.1f;
  s.tie_embeddings = true;
  return models::Model::build(s);
}

struct ClipCase {
  FlushCase flush;
  bool gpt = false;
};

std::ostream& operator<<(std::ostream& os, const ClipCase& c) {
  return os << c.flush.name << (c.gpt ? "_gpt" : "_mlp");
}

class ClippedFlush : public ::testing::TestWithParam<ClipCase> {};

TEST_P(ClippedFlush, EqualsOneDeviceAndReportsItsNorms) {
  const ClipCase& c = GetParam();
  const models::Model model = c.gpt ? tied_gpt() : tiny_mlp();
  constexpr std::int64_t kMinibatches = 5;
  const std::uint64_t seed = 7;
  auto data = [&](std::int64_t b) { return make_minibatch(model, 8, b); };
  // A clip below every norm of the unclipped run, so that clipping acts on most steps.
  const std::vector<double> free =
      one_device(model, sgd_momentum(), seed, kMinibatches, data, 1e30).norms;
  const double clip = 0.5 * *std::min_element(free.begin(), free.end());
  const ClippedRun expected = one_device(model, sgd_momentum(), seed, kMinibatches, data, clip);
  ASSERT_GE(expected.clipped, kMinibatches - 1) << "the clip must act for the test to mean much";

  std::map<std::int64_t, double> norms;
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, flush_params(c.flush, 8, kMinibatches));
  spec.optimizer = sgd_momentum();
  spec.seed = seed;
  spec.data = data;
  spec.clip_grad_norm = clip;
  spec.on_minibatch = [&norms](std::int64_t b, const MinibatchReport& r) {
    norms[b] = r.grad_norm;
  };
  Pipeline pipeline(std::move(spec), make_scheduler(true));
  pipeline.run();

  for (int r = 0; r < *std::max_element(c.flush.replicas.begin(), c.flush.replicas.end()); ++r) {
    EXPECT_LE(max_relative_error(pipeline.params(r), expected.params), 1e-6) << "replica " << r;
  }
  ASSERT_EQ(norms.size(), static_cast<std::size_t>(kMinibatches));
  for (std::int64_t b = 0; b < kMinibatches; ++b) {
    const double want = expected.norms[static_cast<std::size_t>(b)];
    EXPECT_NEAR(norms[b], want, 1e-6 * want) << "minibatch " << b;
    EXPECT_EQ(printed(norms[b]), printed(want)) << "minibatch " << b;
  }
}

std::vector<ClipCase> clip_cases() {
  return {
      {{"onef1b_4stages", ScheduleKind::one_f_one_b, {1, 1, 1, 1}, 4}},
      {{"gpipe_4stages", ScheduleKind::gpipe, {1, 1, 1, 1}, 4}},
      {{"onef1b_211", ScheduleKind::one_f_one_b, {2, 1, 1}, 4}},
      {{"gpipe_121", ScheduleKind::gpipe, {1, 2, 1}, 4}},
      {{"zb_h1_4stages", ScheduleKind::zb_h1, {1, 1, 1, 1}, 4}},
      {{"interleaved", ScheduleKind::interleaved, {1, 1}, 4, 2}},
      {{"one_stage", ScheduleKind::one_f_one_b, {1}, 2}},
      // Tied embeddings: the tie counts once, at its leader, with the copies' total.
      {{"onef1b_4stages", ScheduleKind::one_f_one_b, {1, 1, 1, 1}, 4}, true},
      {{"gpipe_211", ScheduleKind::gpipe, {2, 1, 1}, 2}, true},
  };
}

INSTANTIATE_TEST_SUITE_P(Schedules, ClippedFlush, ::testing::ValuesIn(clip_cases()),
                         [](const auto& test) {
                           return test.param.flush.name + (test.param.gpt ? "_gpt" : "_mlp");
                         });

// PipeDream: each stage clips by its own gradient's norm (its updates share no moment with the
// others'). The gradient a STEP applies is at most the clip, and exactly the clip where it
// acted; the reported norm is that of the stages' unclipped gradients together.
TEST(ClippedPipeDream, EachStageClipsByItsOwnNorm) {
  const models::Model model = tiny_mlp();
  constexpr std::int64_t kMinibatches = 8;
  const double clip = 0.05;
  std::mutex mu;
  std::map<std::pair<std::int64_t, int>, double> applied;  // (round, stage) -> norm applied
  std::map<std::int64_t, double> reported;
  models::OptimizerSpec sgd;
  sgd.kind = "sgd";
  sgd.lr = 0.05;
  PipelineSpec spec;
  spec.model = &model;
  schedules::ScheduleParams p;
  p.kind = ScheduleKind::pipedream;
  p.stages = 4;
  p.minibatch_size = 8;
  p.minibatches = kMinibatches;
  spec.plan = even_plan(model, p);
  spec.optimizer = sgd;
  spec.seed = 3;
  spec.data = [&](std::int64_t b) { return make_minibatch(model, 8, b); };
  spec.clip_grad_norm = clip;
  const models::GradNormLayout layout(model);
  spec.observer = [&](const StageEvent& e) {
    if (e.action.op != Op::STEP) return;
    const double norm = models::gradient_norm(models::cpu_kernels(), layout, *e.grads);
    std::lock_guard lock(mu);
    applied[{e.action.minibatch, e.stage}] = norm;
  };
  spec.on_minibatch = [&](std::int64_t b, const MinibatchReport& r) { reported[b] = r.grad_norm; };
  Pipeline pipeline(std::move(spec), make_scheduler(true));
  pipeline.run();

  ASSERT_EQ(applied.size(), static_cast<std::size_t>(kMinibatches * 4));
  int at_clip = 0;
  for (const auto& [key, norm] : applied) {
    EXPECT_LE(norm, clip * (1 + 1e-5)) << "round " << key.first << " stage " << key.second;
    at_clip += std::fabs(norm - clip) <= 1e-4 * clip ? 1 : 0;
  }
  EXPECT_GE(at_clip, kMinibatches * 2) << "the clip must act on most updates";
  ASSERT_EQ(reported.size(), static_cast<std::size_t>(kMinibatches));
  for (std::int64_t b = 0; b < kMinibatches; ++b) {
    double squares = 0;
    for (int s = 0; s < 4; ++s) squares += applied[{b, s}] * applied[{b, s}];
    EXPECT_TRUE(std::isfinite(reported[b]));
    EXPECT_GE(reported[b], std::sqrt(squares) * (1 - 1e-6)) << "minibatch " << b;
  }
}

}  // namespace
}  // namespace tandem::actors
