// The pipeline on cuda:0: every stage replica on the same GPU, each with an executor of its own
// (its own compute and copy streams), must train as the CPU does. The same contract as the
// deferred CPU device's (pipeline_async_device_test.cpp), on the real device: kernels enqueued
// on streams, completions from CUDA events, tensors handed between stages that compute on
// different streams. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline_harness.hpp"
#include "tests/runtime/require_gpu.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::ScheduleKind;
using schedules::ScheduleParams;

struct CudaCase {
  const char* name;
  ScheduleKind kind;
  int stages;
  int slices;
  int chunks = 1;
  bool remat = false;
  friend void PrintTo(const CudaCase& c, std::ostream* os) { *os << c.name; }
};

struct Trained {
  PipelineResult result;
  models::ParamSet params;
};

Trained train(const models::Model& model, const ScheduleParams& p, const std::string& device) {
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p, device);
  spec.optimizer = sgd_momentum();
  spec.seed = 5;
  spec.data = [&](std::int64_t b) { return make_minibatch(model, p.minibatch_size, b); };
  Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
  Trained r;
  r.result = pipeline.run();
  r.params = pipeline.params(0);  // handed back on the CPU whatever the stages computed on
  return r;
}

class CudaPipeline : public ::testing::TestWithParam<CudaCase> {};

// f32 GEMMs (pedantic, no TF32) and the same dropout masks as the CPU; what differs is the
// order of the sums inside the kernels, so a few ulps per operation: 1e-5 on the losses, 1e-4
// on the weights after three updates. A wrong ordering, a tensor freed or overwritten early, or
// a send before its data is ready is off by far more.
TEST_P(CudaPipeline, TrainsAsTheCpu) {
  TANDEM_REQUIRE_GPU();
  const CudaCase& c = GetParam();
  for (const bool gpt : {false, true}) {
    const models::Model model = gpt ? tiny_gpt(0.1f) : tiny_mlp();
    ScheduleParams p;
    p.kind = c.kind;
    p.stages = c.stages;
    p.replicas.assign(static_cast<std::size_t>(c.stages), 1);
    p.slices = c.slices;
    p.chunks = c.chunks;
    p.rematerialize = c.remat;
    p.minibatch_size = 8;
    p.minibatches = 3;
    const Trained cpu = train(model, p, "cpu");
    const Trained gpu = train(model, p, "cuda:0");
    const std::string what = std::string(c.name) + (gpt ? " gpt" : " mlp");
    ASSERT_EQ(gpu.result.losses.size(), cpu.result.losses.size()) << what;
    for (std::size_t i = 0; i < cpu.result.losses.size(); ++i) {
      ASSERT_TRUE(std::isfinite(gpu.result.losses[i])) << what << " minibatch " << i;
      EXPECT_NEAR(gpu.result.losses[i], cpu.result.losses[i],
                  1e-5 * std::max(1.0, std::fabs(cpu.result.losses[i])))
          << what << " minibatch " << i;
    }
    EXPECT_LE(max_relative_error(gpu.params, cpu.params), 1e-4) << what;
    for (const StageStats& s : gpu.result.stages) {
      EXPECT_GT(s.busy_s, 0.0) << what << " stage " << s.stage << ": device time from its events";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, CudaPipeline,
    ::testing::Values(CudaCase{"gpipe_2", ScheduleKind::gpipe, 2, 4},
                      CudaCase{"gpipe_remat_2", ScheduleKind::gpipe, 2, 4, 1, true},
                      CudaCase{"one_f_one_b_4", ScheduleKind::one_f_one_b, 4, 4},
                      CudaCase{"pipedream_3", ScheduleKind::pipedream, 3, 1},
                      CudaCase{"zb_h1_3", ScheduleKind::zb_h1, 3, 4},
                      CudaCase{"interleaved_2", ScheduleKind::interleaved, 2, 4, 2}),
    [](const ::testing::TestParamInfo<CudaCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace tandem::actors
