// Batch norm on a pipeline: each slice normalises with its own statistics, and the running
// statistics advance once per step from the sums the slices left in the buffers' gradient slots.
// So a flush pipeline equals one device that runs the same slices one after another and steps
// once per minibatch, running statistics included (docs/numerics.md, "Batch norm").
#include <gtest/gtest.h>

#include <algorithm>

#include "pipeline_harness.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::ScheduleKind;

// conv -> batch_norm -> relu -> global_avg_pool -> linear over 2x4x4 images (a reshape first):
// two even stages put the batch norm on stage 0 and its consumers on stage 1.
models::Model conv_bn_graph() {
  models::ModelSpec s;
  s.name = "graph";
  s.graph.input_shape = {2 * 4 * 4};
  auto node = [](std::string name, std::string layer) {
    models::GraphNode n;
    n.name = std::move(name);
    n.layer = std::move(layer);
    return n;
  };
  models::GraphNode img = node("img", "reshape");
  img.shape = {2, 4, 4};
  models::GraphNode conv = node("conv", "conv2d");
  conv.out = 4;
  conv.kernel = 3;
  conv.pad = 1;
  models::GraphNode head = node("head", "linear");
  head.out = 5;
  s.graph.nodes = {
      img, conv, node("bn", "batch_norm"), node("relu", "relu"), node("pool", "global_avg_pool"),
      head};
  return models::Model::build(s);
}

// One device, slice by slice: each slice's forward and backward on its own (its own batch
// statistics), gradients and buffer sums added over the slices, one step per minibatch.
models::ParamSet sliced_reference(const models::Model& model, models::ParamSet params,
                                  const models::OptimizerSpec& opt, std::uint64_t seed,
                                  std::int64_t minibatches, std::int64_t slices,
                                  const std::function<MinibatchData(std::int64_t)>& data) {
  auto optimizer = models::make_optimizer(opt);
  optimizer->attach(model);
  for (std::int64_t b = 0; b < minibatches; ++b) {
    const MinibatchData d = data(b);
    const std::int64_t n = d.samples();
    const float scale = 1.0f / static_cast<float>(d.loss_rows());
    models::ParamSet grads = params.zeros_like();
    for (std::int64_t s = 0; s < slices; ++s) {
      const schedules::Slice slice{s * n / slices, (s + 1) * n / slices};
      models::Context ctx;
      ctx.training = true;
      ctx.seed = step_seed(seed, b);
      ctx.sample_begin = slice.begin;
      auto fwd = model.forward(ctx, params, d.rows(slice, false), 0, model.num_layers());
      auto l = model.loss().compute(ctx, fwd.y, d.rows(slice, true), true, scale);
      model.backward(ctx, params, fwd.saved, l.dlogits, 0, model.num_layers(), false, grads, 1.0f,
                     s == 0 ? 0.0f : 1.0f);
    }
    optimizer->step(params, grads);
  }
  return params;
}

class BatchNormFlush : public ::testing::TestWithParam<FlushCase> {};

TEST_P(BatchNormFlush, EqualsOneDeviceRunningTheSameSlices) {
  const FlushCase& c = GetParam();
  const models::Model model = conv_bn_graph();
  constexpr std::int64_t kMinibatches = 3;
  constexpr std::int64_t kSamples = 8;
  const std::uint64_t seed = 5;
  auto data = [&](std::int64_t b) { return make_minibatch(model, kSamples, b); };
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, flush_params(c, kSamples, kMinibatches));
  spec.optimizer = sgd_momentum();
  spec.seed = seed;
  spec.data = data;
  Pipeline pipeline(std::move(spec), make_scheduler(true));
  pipeline.run();

  const models::ParamSet init = model.init_params(seed);
  const models::ParamSet expected =
      sliced_reference(model, init, sgd_momentum(), seed, kMinibatches, c.slices, data);
  const models::ParamSet got = pipeline.params(0);
  EXPECT_LE(max_relative_error(got, expected), 1e-6);
  // The running statistics moved (three updates) and match the reference's.
  EXPECT_EQ(got.at("2.count").to_float_vector()[0], 3.0f);
  EXPECT_NE(got.at("2.running_mean").to_float_vector(),
            init.at("2.running_mean").to_float_vector());
  for (const char* name : {"2.running_mean", "2.running_var", "2.count"}) {
    models::ParamSet one, want;
    one.add(name, got.at(name));
    want.add(name, expected.at(name));
    EXPECT_LE(max_relative_error(one, want), 1e-6) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, BatchNormFlush,
    ::testing::Values(FlushCase{"onef1b_2stages_2slices", ScheduleKind::one_f_one_b, {1, 1}, 2},
                      FlushCase{"gpipe_2stages_2slices", ScheduleKind::gpipe, {1, 1}, 2},
                      FlushCase{"zb_h1_2stages_2slices", ScheduleKind::zb_h1, {1, 1}, 2}),
    [](const auto& test) { return test.param.name; });

// The seed paper's image networks, small, on four 1F1B stages: every batch norm of ResNet-50's
// bottlenecks and Inception-v3's branches normalises per slice, and the run equals the one
// device that uses the same slices.
TEST(ImageZooFlush, ResNet50AndInceptionV3EqualOneDeviceRunningTheSameSlices) {
  for (const char* name : {"resnet50", "inception_v3"}) {
    models::ModelSpec s;
    s.name = name;
    s.width_mult = 1.0 / 16;
    s.image_size = s.name == "resnet50" ? 32 : 75;
    s.classes = 4;
    const models::Model model = models::Model::build(s);
    constexpr std::int64_t kMinibatches = 2;
    constexpr std::int64_t kSamples = 4;
    const std::uint64_t seed = 7;
    auto data = [&](std::int64_t b) { return make_minibatch(model, kSamples, b); };
    const FlushCase c{"onef1b_4stages", ScheduleKind::one_f_one_b, {1, 1, 1, 1}, 2};
    PipelineSpec spec;
    spec.model = &model;
    spec.plan = even_plan(model, flush_params(c, kSamples, kMinibatches));
    spec.optimizer = sgd_momentum();
    spec.seed = seed;
    spec.data = data;
    Pipeline pipeline(std::move(spec), make_scheduler(true));
    pipeline.run();
    const models::ParamSet expected = sliced_reference(model, model.init_params(seed),
                                                       sgd_momentum(), seed, kMinibatches, 2, data);
    EXPECT_LE(max_relative_error(pipeline.params(0), expected), 1e-6) << name;
  }
}

}  // namespace
}  // namespace tandem::actors
