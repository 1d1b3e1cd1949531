// Stopping a run early from another thread, and resuming a run where another stopped: the
// stopped run is exactly a shorter run, and K minibatches, a stop and N - K more are exactly N.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
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
  std::vector<std::map<std::int64_t, models::ParamSet>> older_versions;
};

schedules::ScheduleParams params_of(ScheduleKind kind, int stages, std::int64_t minibatches,
                                    std::vector<int> replicas = {}) {
  schedules::ScheduleParams p;
  p.kind = kind;
  p.stages = stages;
  // 2BW pipelines micro-batches within a batch: at least one per stage.
  p.slices = kind == ScheduleKind::pipedream || kind == ScheduleKind::pipedream_vsync ? 1 : 4;
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
    spec.on_minibatch = [&self, stop_after](std::int64_t b, const MinibatchReport&) {
      if (b == stop_after) self.load()->request_stop();
    };
  }
  Pipeline pipeline(std::move(spec), make_scheduler(threads));
  self = &pipeline;
  Outcome out;
  out.result = pipeline.run();
  out.params = pipeline.params();
  for (int s = 0; s < stages; ++s) {
    out.optimizer.push_back(pipeline.optimizer_state(s));
    out.older_versions.push_back(pipeline.older_versions(s));
  }
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
  spec.on_minibatch = [&seen](std::int64_t b, const MinibatchReport&) { seen = b + 1; };
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

// K minibatches, then a new pipeline from their weights, optimizer state and older weight
// versions at minibatch K, then N - K more: bit-identical to N at once. Flush schedules keep
// nothing between minibatches but weights and optimizer state; the asynchronous ones had
// minibatches in flight at K, which the resumed run replays at the versions they had.
struct ResumeCase {
  const char* name;
  ScheduleKind kind;
  std::vector<int> replicas;
  std::int64_t stop, total;
  friend void PrintTo(const ResumeCase& c, std::ostream* os) { *os << c.name; }
};

class ResumeTest : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(ResumeTest, ResumedRunIsBitIdenticalToAnUninterruptedOne) {
  const models::Model model = tiny_gpt();
  const ResumeCase& c = GetParam();
  const auto params = [&c](std::int64_t n) { return params_of(c.kind, 3, n, c.replicas); };
  ASSERT_EQ(schedules::stop_boundary(params(c.total), c.stop), c.stop);
  const Outcome whole = run(spec_of(model, params(c.total)), true);
  const Outcome first = run(spec_of(model, params(c.stop)), true);
  PipelineSpec rest = spec_of(model, params(c.total - c.stop));
  rest.initial_params = first.params;
  rest.first_minibatch = c.stop;
  rest.optimizer_states = first.optimizer;
  rest.older_versions = first.older_versions;
  const Outcome second = run(std::move(rest), true);
  expect_identical(second.params, whole.params);
  std::vector<double> losses = first.result.losses;
  losses.insert(losses.end(), second.result.losses.begin(), second.result.losses.end());
  EXPECT_EQ(losses, whole.result.losses);
  for (int s = 0; s < 3; ++s) {
    const auto i = static_cast<std::size_t>(s);
    EXPECT_EQ(second.optimizer[i].steps, whole.optimizer[i].steps);
    expect_identical(second.optimizer[i].state, whole.optimizer[i].state);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, ResumeTest,
    ::testing::Values(ResumeCase{"gpipe", ScheduleKind::gpipe, {}, 3, 7},
                      ResumeCase{"one_f_one_b", ScheduleKind::one_f_one_b, {}, 3, 7},
                      ResumeCase{"pipedream", ScheduleKind::pipedream, {}, 5, 12},
                      ResumeCase{"pipedream_2_1_3", ScheduleKind::pipedream, {2, 1, 3}, 6, 17},
                      ResumeCase{"vertical_sync", ScheduleKind::pipedream_vsync, {}, 5, 12},
                      ResumeCase{"two_bw", ScheduleKind::pipedream_2bw, {}, 5, 12}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// The minibatches in flight at a stop keep the versions they had: a run that stopped hands
// them over, and a resume without them is refused before anything runs.
TEST(PipelineResume, PipeDreamHandsOverTheVersionsInFlight) {
  const models::Model model = tiny_mlp();
  const Outcome first = run(spec_of(model, params_of(ScheduleKind::pipedream, 3, 6)), false);
  // Stage s's forwards of minibatches 6.. use versions 6 - (2 - s) and on; its latest is 6.
  for (int s = 0; s < 3; ++s) {
    std::vector<std::int64_t> got;
    for (const auto& [v, p] : first.older_versions[static_cast<std::size_t>(s)]) got.push_back(v);
    std::vector<std::int64_t> want;
    for (std::int64_t v = 6 - (2 - s); v < 6; ++v) want.push_back(v);
    EXPECT_EQ(got, want) << "stage " << s;
  }
  PipelineSpec rest = spec_of(model, params_of(ScheduleKind::pipedream, 3, 4));
  rest.initial_params = first.params;
  rest.first_minibatch = 6;
  rest.optimizer_states = first.optimizer;
  try {
    Pipeline pipeline(std::move(rest), make_scheduler(false));
    FAIL() << "a PipeDream resume without the versions in flight was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("weight version 4 of stage 0"), std::string::npos)
        << e.what();
  }
}

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
