// Stopping a run early from another thread, and resuming a run where another stopped: the
// stopped run is exactly a shorter run, and K minibatches, a stop and N - K more are exactly N.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "pipeline_harness.hpp"
#include "schedules/pipeline_rules.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::ScheduleKind;

struct Outcome {
  PipelineResult result;
  models::ParamSet params;
  std::vector<OptimizerState> optimizer;
};

schedules::ScheduleParams params_of(ScheduleKind kind, int stages, std::int64_t minibatches,
                                    std::vector<int> replicas = {}) {
  schedules::ScheduleParams p;
  p.kind = kind;
  p.stages = stages;
  p.slices = kind == ScheduleKind::pipedream ? 1 : 4;
  p.minibatch_size = 8;
  p.replicas = std::move(replicas);
  p.minibatches = minibatches;
  return p;
}

PipelineSpec spec_of(const models::Model& model, const schedules::ScheduleParams& p) {
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.optimizer = sgd_momentum();
  spec.seed = 11;
  spec.data = [&model](std::int64_t b) { return make_minibatch(model, 8, b); };
  return spec;
}

Outcome run(PipelineSpec spec, bool threads, std::int64_t stop_after = -1) {
  const int stages = spec.plan.schedule.stages;
  std::atomic<Pipeline*> self{nullptr};
  if (stop_after >= 0) {
    spec.on_minibatch = [&self, stop_after](std::int64_t b, double, std::int64_t, std::int64_t) {
      if (b == stop_after) self.load()->request_stop();
    };
  }
  Pipeline pipeline(std::move(spec), make_scheduler(threads));
  self = &pipeline;
  Outcome out;
  out.result = pipeline.run();
  out.params = pipeline.params();
  for (int s = 0; s < stages; ++s) out.optimizer.push_back(pipeline.optimizer_state(s));
  return out;
}

void expect_identical(const models::ParamSet& a, const models::ParamSet& b) {
  ASSERT_EQ(a.names(), b.names());
  for (std::int64_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].to_float_vector(), b[i].to_float_vector()) << a.name(i);
  }
}

class StopTest : public ::testing::TestWithParam<bool> {};

TEST_P(StopTest, FlushRunStoppedFromTheLossCallbackIsAShorterRun) {
  const models::Model model = tiny_gpt();
  const auto p = params_of(ScheduleKind::one_f_one_b, 3, 40);
  const Outcome stopped = run(spec_of(model, p), GetParam(), /*stop_after=*/4);
  const std::int64_t n = stopped.result.minibatches;
  // Minibatches admitted when the request lands all complete; none after them starts.
  ASSERT_GE(n, 5);
  ASSERT_LT(n, 40);
  ASSERT_EQ(stopped.result.losses.size(), static_cast<std::size_t>(n));
  const Outcome shorter = run(spec_of(model, params_of(ScheduleKind::one_f_one_b, 3, n)), false);
  expect_identical(stopped.params, shorter.params);
  EXPECT_EQ(stopped.result.losses, shorter.result.losses);
}

TEST_P(StopTest, PipeDreamWithReplicasStopsOnAWholeRound) {
  const models::Model model = tiny_mlp();
  const auto p = params_of(ScheduleKind::pipedream, 3, 60, {2, 1, 3});
  const Outcome stopped = run(spec_of(model, p), GetParam(), /*stop_after=*/7);
  const std::int64_t n = stopped.result.minibatches;
  ASSERT_GE(n, 8);
  ASSERT_LT(n, 60);
  EXPECT_EQ(n % 6, 0) << "a stop inside a SYNC round of a replicated stage";
  EXPECT_EQ(schedules::stop_boundary(p, n), n);
  const Outcome shorter =
      run(spec_of(model, params_of(ScheduleKind::pipedream, 3, n, {2, 1, 3})), false);
  expect_identical(stopped.params, shorter.params);
  EXPECT_EQ(stopped.result.losses, shorter.result.losses);
}

INSTANTIATE_TEST_SUITE_P(Schedulers, StopTest, ::testing::Values(false, true),
                         [](const auto& param_info) {
                           return param_info.param ? "threads" : "manual";
                         });

TEST(PipelineStop, StopFromAnotherThreadEndsTheRunCleanly) {
  const models::Model model = tiny_mlp();
  const auto p = params_of(ScheduleKind::pipedream, 4, 100000);
  std::atomic<std::int64_t> seen{0};
  PipelineSpec spec = spec_of(model, p);
  spec.on_minibatch = [&seen](std::int64_t b, double, std::int64_t, std::int64_t) { seen = b + 1; };
  Pipeline pipeline(std::move(spec), make_scheduler(true));
  std::thread stopper([&] {
    while (seen.load() < 20) std::this_thread::yield();
    pipeline.request_stop();
  });
  const PipelineResult r = pipeline.run();
  stopper.join();
  EXPECT_GE(r.minibatches, 20);
  EXPECT_LT(r.minibatches, 100000);
  EXPECT_EQ(r.losses.size(), static_cast<std::size_t>(r.minibatches));
  for (const StageStats& s : r.stages) EXPECT_TRUE(s.finished);
}

TEST(PipelineStop, StopBeforeTheRunRunsNothing) {
  const models::Model model = tiny_mlp();
  Pipeline pipeline(spec_of(model, params_of(ScheduleKind::gpipe, 2, 5)), make_scheduler(false));
  pipeline.request_stop();
  const PipelineResult r = pipeline.run();
  EXPECT_EQ(r.minibatches, 0);
  EXPECT_TRUE(r.losses.empty());
}

// K minibatches, then a new pipeline from their weights and optimizer state at minibatch K,
// then N - K more: bit-identical to N at once (flush schedules keep no state between minibatches
// but the weights and the optimizer's).
class ResumeTest : public ::testing::TestWithParam<ScheduleKind> {};

TEST_P(ResumeTest, ResumedRunIsBitIdenticalToAnUninterruptedOne) {
  const models::Model model = tiny_gpt();
  const ScheduleKind kind = GetParam();
  const Outcome whole = run(spec_of(model, params_of(kind, 3, 7)), true);
  const Outcome first = run(spec_of(model, params_of(kind, 3, 3)), true);
  PipelineSpec rest = spec_of(model, params_of(kind, 3, 4));
  rest.initial_params = first.params;
  rest.first_minibatch = 3;
  rest.optimizer_states = first.optimizer;
  const Outcome second = run(std::move(rest), true);
  expect_identical(second.params, whole.params);
  std::vector<double> losses = first.result.losses;
  losses.insert(losses.end(), second.result.losses.begin(), second.result.losses.end());
  EXPECT_EQ(losses, whole.result.losses);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(second.optimizer[static_cast<std::size_t>(s)].steps, 7);
    expect_identical(second.optimizer[static_cast<std::size_t>(s)].state,
                     whole.optimizer[static_cast<std::size_t>(s)].state);
  }
}

INSTANTIATE_TEST_SUITE_P(FlushSchedules, ResumeTest,
                         ::testing::Values(ScheduleKind::gpipe, ScheduleKind::one_f_one_b),
                         [](const auto& param_info) {
                           return std::string(
                               param_info.param == ScheduleKind::gpipe ? "gpipe" : "one_f_one_b");
                         });

TEST(PipelineResume, RefusesToResumeInsideASyncRound) {
  const models::Model model = tiny_mlp();
  PipelineSpec spec = spec_of(model, params_of(ScheduleKind::pipedream, 2, 4, {2, 1}));
  spec.first_minibatch = 3;
  try {
    Pipeline pipeline(std::move(spec), make_scheduler(false));
    FAIL() << "a resume at minibatch 3 of a stage with 2 replicas was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("minibatch 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::actors
