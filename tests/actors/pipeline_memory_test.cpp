// A replica's reported peak memory: its weights times the versions it held plus what its
// forwards kept for their backwards, so schedules that keep more activations report more.
#include <gtest/gtest.h>

#include "pipeline_harness.hpp"

namespace tandem::actors {
namespace {

using namespace testing;

StageStats first_stage(schedules::ScheduleKind kind) {
  const models::Model model = tiny_gpt(0.0f);
  schedules::ScheduleParams p;
  p.kind = kind;
  p.stages = 2;
  p.slices = 4;
  p.minibatch_size = 8;
  p.minibatches = 2;
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.optimizer = sgd_momentum();
  spec.data = [&model](std::int64_t b) { return make_minibatch(model, 8, b); };
  Pipeline pipeline(std::move(spec), make_scheduler(false));
  const PipelineResult r = pipeline.run();
  for (const StageStats& s : r.stages) {
    if (s.stage == 0) {
      std::size_t bytes = 0;
      const models::ParamSet w = pipeline.stage(0).latest_params();
      for (const Tensor& t : w.range(0, w.size())) bytes += t.nbytes();
      EXPECT_EQ(s.weight_bytes, bytes);
      return s;
    }
  }
  ADD_FAILURE() << "no stage 0";
  return {};
}

TEST(PipelineMemory, GPipeKeepsMoreActivationsThanOneFOneB) {
  const StageStats gpipe = first_stage(schedules::ScheduleKind::gpipe);
  const StageStats one_f_one_b = first_stage(schedules::ScheduleKind::one_f_one_b);
  EXPECT_EQ(gpipe.peak_activations, 4u);
  EXPECT_EQ(one_f_one_b.peak_activations, 2u);
  // Equal weights, so the difference is two slices' activations.
  EXPECT_EQ(gpipe.weight_bytes, one_f_one_b.weight_bytes);
  EXPECT_GT(one_f_one_b.peak_bytes, one_f_one_b.weight_bytes);
  const std::size_t a4 = gpipe.peak_bytes - gpipe.weight_bytes;
  const std::size_t a2 = one_f_one_b.peak_bytes - one_f_one_b.weight_bytes;
  EXPECT_EQ(a4, 2 * a2);
}

}  // namespace
}  // namespace tandem::actors
