// The stage actors' path for asynchronous devices (cuda), on the CPU: an executor that computes
// inline but reports completion through an Event of a cpu Stream that runs late, and hands the
// loss over only when that event completes. A stage that sent its results, built its loss
// report or started a SYNC before the completion would show here as wrong losses or weights,
// exactly as it would on a GPU. A device failure carried by the event must stop the run with
// an error naming the stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "deferred_cpu_device.hpp"
#include "models/executor.hpp"
#include "pipeline_harness.hpp"
#include "runtime/stream.hpp"
#include "schedules/action.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::ScheduleKind;
using schedules::ScheduleParams;

// Computes on the CPU at once, but says the work is done only when its stream reaches the
// completion: the stream first sleeps a little, so later actions are submitted before earlier
// ones complete. The loss sums reach the host on the stream too.
class LateCpuExecutor final : public models::Executor {
 public:
  // fail_after >= 0: the work of that many runs later fails on the device.
  explicit LateCpuExecutor(int fail_after = -1) : fail_after_(fail_after) {}
  Device device() const override { return Device::cpu(); }

  models::Completion run(models::Context ctx,
                         const std::function<void(const models::Context&)>& work) override {
    inner_->run(ctx, work);
    const int n = runs_++;
    stream_.enqueue([n, fail = fail_after_] {
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      if (fail >= 0 && n >= fail) throw std::runtime_error("simulated device fault");
    });
    models::Completion c;
    c.done = stream_.record();
    return c;
  }

  models::LossResult loss(const models::Context& ctx, const models::Loss& loss,
                          const Tensor& logits, const Tensor& targets,
                          float grad_scale) const override {
    const models::LossResult now = inner_->loss(ctx, loss, logits, targets, grad_scale);
    models::LossResult r;
    r.count = now.count;
    r.dlogits = now.dlogits;
    r.pending_sums = Tensor::zeros({4}, DType::f32);
    // Written on the stream: a stage that read the sums before the completion reads zeros.
    stream_.enqueue(
        [sums = r.pending_sums, loss_sum = now.loss_sum, correct = now.correct]() mutable {
          auto* bytes = static_cast<unsigned char*>(sums.raw_data());
          std::memcpy(bytes, &loss_sum, sizeof loss_sum);
          std::memcpy(bytes + sizeof(double), &correct, sizeof correct);
        });
    return r;
  }

  void step(const models::Context& ctx, models::Optimizer& optimizer, models::ParamSet& params,
            const models::ParamSet& grads) const override {
    inner_->step(ctx, optimizer, params, grads);
  }

 private:
  std::unique_ptr<models::Executor> inner_ = models::make_executor(Device::cpu(), {}, 1);
  mutable Stream stream_;
  int fail_after_;
  int runs_ = 0;
};

ScheduleParams params(ScheduleKind kind, int stages, std::vector<int> replicas,
                      std::int64_t minibatches) {
  ScheduleParams p;
  p.kind = kind;
  p.stages = stages;
  p.replicas = std::move(replicas);
  p.slices = kind == ScheduleKind::pipedream ? 1 : 4;  // PipeDream runs whole minibatches
  p.minibatch_size = 8;
  p.minibatches = minibatches;
  return p;
}

struct Trained {
  PipelineResult result;
  std::vector<models::ParamSet> params;
};

enum class Device_ { sync, late, deferred };

Trained train(const models::Model& model, const ScheduleParams& p, Device_ device,
              const schedules::Plan* plan = nullptr, StageObserver observer = {}) {
  PipelineSpec spec;
  spec.observer = std::move(observer);
  spec.model = &model;
  spec.plan = plan != nullptr ? *plan : even_plan(model, p);
  spec.optimizer = sgd_momentum();
  spec.seed = 5;
  spec.data = [&](std::int64_t b) { return make_minibatch(model, p.minibatch_size, b); };
  if (device == Device_::late) {
    spec.make_executor = [](Device, int) { return std::make_unique<LateCpuExecutor>(); };
  } else if (device == Device_::deferred) {
    spec.make_executor = [](Device, int) { return std::make_unique<DeferredCpuExecutor>(); };
  }
  Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
  Trained r;
  r.result = pipeline.run();
  int replicas = 1;
  for (int s = 0; s < p.stages; ++s) replicas = std::max(replicas, p.replicas_of(s));
  for (int i = 0; i < replicas; ++i) r.params.push_back(pipeline.params(i));
  return r;
}

void expect_same_training(const models::Model& model, const ScheduleParams& p) {
  const Trained sync = train(model, p, Device_::sync);
  const Trained late = train(model, p, Device_::late);
  ASSERT_EQ(late.result.losses.size(), sync.result.losses.size());
  for (std::size_t i = 0; i < sync.result.losses.size(); ++i) {
    EXPECT_EQ(late.result.losses[i], sync.result.losses[i]) << "minibatch " << i;
  }
  for (std::size_t d = 0; d < sync.params.size(); ++d) {
    EXPECT_EQ(max_relative_error(late.params[d], sync.params[d]), 0.0) << "replica " << d;
  }
}

TEST(AsyncDevice, GPipeTrainsAsWithTheSynchronousCpu) {
  const models::Model model = tiny_mlp();
  expect_same_training(model, params(ScheduleKind::gpipe, 3, {1, 1, 1}, 3));
}

TEST(AsyncDevice, OneFOneBWithAReplicatedStageTrainsAsWithTheSynchronousCpu) {
  const models::Model model = tiny_gpt(0.0f);
  expect_same_training(model, params(ScheduleKind::one_f_one_b, 3, {1, 2, 1}, 3));
}

TEST(AsyncDevice, PipeDreamTrainsAsWithTheSynchronousCpu) {
  const models::Model model = tiny_mlp();
  expect_same_training(model, params(ScheduleKind::pipedream, 3, {1, 1, 1}, 4));
}

// Kernels that run only when the stream gets to them, on memory poisoned with NaN: every
// schedule must train as the synchronous CPU does (the same kernels, so up to the summation
// order of the kernels' thread split).
struct DeferredCase {
  const char* name;
  ScheduleKind kind;
  int stages;
  std::vector<int> replicas;
  int slices;
  int chunks = 1;
  bool remat = false;
  std::vector<std::vector<std::int64_t>> fwd = {}, bwd = {};  // umpipe: slices per stage
  friend void PrintTo(const DeferredCase& c, std::ostream* os) { *os << c.name; }
};

class DeferredDevice : public ::testing::TestWithParam<DeferredCase> {};

TEST_P(DeferredDevice, TrainsAsTheSynchronousCpu) {
  const DeferredCase& c = GetParam();
  for (const bool gpt : {false, true}) {
    const models::Model model = gpt ? tiny_gpt(0.1f) : tiny_mlp();
    ScheduleParams p = params(c.kind, c.stages, c.replicas, 3);
    p.slices = c.slices;
    p.chunks = c.chunks;
    p.rematerialize = c.remat;
    p.forward_slices = c.fwd;
    p.backward_slices = c.bwd;
    const Trained sync = train(model, p, Device_::sync);
    const Trained deferred = train(model, p, Device_::deferred);
    const std::string what = std::string(c.name) + (gpt ? " gpt" : " mlp");
    ASSERT_EQ(deferred.result.losses.size(), sync.result.losses.size()) << what;
    for (std::size_t i = 0; i < sync.result.losses.size(); ++i) {
      EXPECT_NEAR(deferred.result.losses[i], sync.result.losses[i],
                  1e-6 * std::max(1.0, std::fabs(sync.result.losses[i])))
          << what << " minibatch " << i;
    }
    for (std::size_t d = 0; d < sync.params.size(); ++d) {
      EXPECT_LE(max_relative_error(deferred.params[d], sync.params[d]), 1e-5)
          << what << " replica " << d;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, DeferredDevice,
    ::testing::Values(DeferredCase{"gpipe", ScheduleKind::gpipe, 3, {1, 1, 1}, 4},
                      DeferredCase{"gpipe_remat", ScheduleKind::gpipe, 2, {1, 1}, 4, 1, true},
                      DeferredCase{"one_f_one_b_121", ScheduleKind::one_f_one_b, 3, {1, 2, 1}, 4},
                      DeferredCase{"pipedream", ScheduleKind::pipedream, 3, {1, 1, 1}, 1},
                      DeferredCase{"zb_h1", ScheduleKind::zb_h1, 3, {1, 1, 1}, 4},
                      DeferredCase{"interleaved", ScheduleKind::interleaved, 2, {1, 1}, 4, 2},
                      // Backward slices cut across forward ones: saved state and the loss
                      // gradient are re-sliced and joined, on the device.
                      DeferredCase{"umpipe",
                                   ScheduleKind::umpipe,
                                   3,
                                   {1, 1, 1},
                                   2,
                                   1,
                                   false,
                                   {{1, 3, 4}, {4, 4}, {2, 6}},
                                   {{3, 5}, {8}, {5, 3}}}),
    [](const ::testing::TestParamInfo<DeferredCase>& i) { return std::string(i.param.name); });

// An asynchronous stage charges the device time its executor's timed events measured (busy_s,
// hence utilization) and reports those events with each action, so that a trace draws an action
// where the device ran it rather than where the actor submitted it.
TEST(AsyncDevice, BusyTimeAndActionTimesComeFromTheDevicesEvents) {
  const models::Model model = tiny_mlp();
  const ScheduleParams p = params(ScheduleKind::one_f_one_b, 2, {1, 1}, 3);
  std::mutex mu;
  std::vector<StageEvent> seen;  // weights/grads pointers are not read after the call
  const Trained t = train(model, p, Device_::deferred, nullptr, [&](const StageEvent& e) {
    std::lock_guard lock(mu);
    seen.push_back(e);
  });
  std::map<int, std::vector<const StageEvent*>> by_device;
  for (const StageEvent& e : seen) by_device[e.device].push_back(&e);
  ASSERT_EQ(t.result.stages.size(), 2u);
  for (const StageStats& stats : t.result.stages) {
    SCOPED_TRACE("device " + std::to_string(stats.device));
    const std::vector<const StageEvent*>& events = by_device[stats.device];
    ASSERT_FALSE(events.empty());
    double device_s = 0;
    std::optional<std::chrono::steady_clock::time_point> previous_end;
    for (const StageEvent* e : events) {
      ASSERT_TRUE(e->device_done.recorded()) << schedules::to_string(e->action);
      const auto at = e->device_started.completed_at();
      const auto took = e->device_done.elapsed_since(e->device_started);
      ASSERT_TRUE(at.has_value() && took.has_value()) << schedules::to_string(e->action);
      EXPECT_GE(*at, e->start) << "the stream reached the work after the actor submitted it";
      EXPECT_GE(took->count(), 0);
      // The stage's stream runs its actions in the order it submitted them.
      if (previous_end) {
        EXPECT_GE(*at, *previous_end) << schedules::to_string(e->action);
      }
      previous_end = e->device_done.completed_at();
      device_s += std::chrono::duration<double>(*took).count();
    }
    EXPECT_GT(stats.busy_s, 0.0);
    EXPECT_NEAR(stats.busy_s, device_s, 1e-9 * static_cast<double>(events.size()));
  }
}

TEST(AsyncDevice, AFailureOnTheDeviceStopsTheRunNamingTheStage) {
  const models::Model model = tiny_mlp();
  const ScheduleParams p = params(ScheduleKind::gpipe, 2, {1, 1}, 3);
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.optimizer = sgd_momentum();
  spec.seed = 5;
  spec.data = [&](std::int64_t b) { return make_minibatch(model, p.minibatch_size, b); };
  spec.make_executor = [](Device, int) { return std::make_unique<LateCpuExecutor>(3); };
  Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
  std::string error;
  try {
    pipeline.run();
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("device work failed: simulated device fault"), std::string::npos) << error;
  EXPECT_NE(error.find("stage "), std::string::npos) << error;
}

}  // namespace
}  // namespace tandem::actors
