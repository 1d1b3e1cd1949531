// The embedding API as an application uses it: a model with a custom layer, a plan written in
// code, data and metrics through callbacks, and stopping from other threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "tandem/tandem.hpp"

namespace {

constexpr std::int64_t kFeatures = 8;
constexpr std::int64_t kClasses = 3;
constexpr std::int64_t kMinibatch = 16;

// y = 2 * max(x, 0): a custom layer without parameters that counts its calls.
class ScaledRelu final : public tandem::Layer {
 public:
  std::string kind() const override { return "scaled_relu"; }
  std::string describe() const override { return "scaled_relu(2)"; }
  tandem::Shape output_shape(const tandem::Shape& input) const override { return input; }
  tandem::ForwardResult forward(const tandem::LayerContext& ctx, tandem::ParamView,
                                const tandem::Tensor& x) const override {
    forwards.fetch_add(1, std::memory_order_relaxed);
    tandem::Tensor y = tandem::Tensor::empty(x.shape());
    const float* xs = x.data<float>();
    float* ys = y.data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) ys[i] = 2.0f * std::max(xs[i], 0.0f);
    tandem::ForwardResult out{y, {}};
    if (ctx.keep_saved) out.saved = {y};
    return out;
  }
  tandem::Tensor backward_input(const tandem::LayerContext&, tandem::ParamView,
                                tandem::Saved& saved, const tandem::Tensor& dy) const override {
    backwards.fetch_add(1, std::memory_order_relaxed);
    tandem::Tensor dx = tandem::Tensor::empty(dy.shape());
    const float* ys = saved.at(0).data<float>();
    const float* g = dy.data<float>();
    float* d = dx.data<float>();
    for (std::int64_t i = 0; i < dy.numel(); ++i) d[i] = ys[i] > 0 ? 2.0f * g[i] : 0.0f;
    return dx;
  }
  mutable std::atomic<std::int64_t> forwards{0}, backwards{0};
};

// A learnable task: the class is the index of the largest of the first kClasses features.
tandem::Batch make_batch(std::int64_t b) {
  std::vector<float> x(static_cast<std::size_t>(kMinibatch * kFeatures));
  std::vector<std::int32_t> y(static_cast<std::size_t>(kMinibatch));
  std::uint64_t s = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(b + 1);
  for (float& v : x) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    v = static_cast<float>(s % 2001) / 1000.0f - 1.0f;
  }
  for (std::int64_t r = 0; r < kMinibatch; ++r) {
    const float* row = &x[static_cast<std::size_t>(r * kFeatures)];
    y[static_cast<std::size_t>(r)] =
        static_cast<std::int32_t>(std::max_element(row, row + kClasses) - row);
  }
  return {tandem::Tensor::from_vector(x, {kMinibatch, kFeatures}),
          tandem::Tensor::from_vector(y, {kMinibatch})};
}

struct Fixture {
  std::shared_ptr<ScaledRelu> custom = std::make_shared<ScaledRelu>();
  tandem::Model model = tandem::Model::classifier(
      kFeatures, {tandem::layers::linear(kFeatures, 16), custom, tandem::layers::linear(16, 16),
                  tandem::layers::relu(), tandem::layers::linear(16, kClasses)});
};

tandem::TrainOptions options_for(tandem::Plan plan, std::int64_t minibatches) {
  tandem::TrainOptions o;
  o.plan = std::move(plan);
  o.minibatches = minibatches;
  o.optimizer = tandem::SgdOptions{.lr = 0.05, .momentum = 0.9};
  o.seed = 3;
  o.data = make_batch;
  o.threads = 2;
  return o;
}

// PipeDream over the fixture's model with stage 0 (layers 0-1) replicated twice: it stops and
// resumes only after an even number of minibatches.
tandem::Plan pipedream_2_1() {
  tandem::Plan p;
  p.stages = {{0, 2, {tandem::Device::cpu(), tandem::Device::cpu()}},
              {2, 5, {tandem::Device::cpu()}}};
  p.schedule = tandem::Schedule::pipedream;
  p.minibatch = kMinibatch;
  return p;
}

double mean(const std::vector<double>& v, std::size_t begin, std::size_t end) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(begin),
                         v.begin() + static_cast<std::ptrdiff_t>(end), 0.0) /
         static_cast<double>(end - begin);
}

TEST(EmbeddingApi, CustomLayerModelLearnsThroughTwoStages) {
  Fixture f;
  ASSERT_EQ(f.model.num_layers(), 5);
  tandem::Plan plan;
  plan.stages = {{0, 2, {tandem::Device::cpu()}}, {2, 5, {tandem::Device::cpu()}}};
  plan.schedule = tandem::Schedule::one_f_one_b;
  plan.minibatch = kMinibatch;
  plan.slices = 2;
  const std::int64_t n = 80;
  tandem::TrainOptions o = options_for(plan, n);
  std::mutex mu;
  std::multiset<std::int64_t> reported;
  o.on_metrics = [&](const tandem::Metrics& m) {
    std::lock_guard lock(mu);
    reported.insert(m.minibatch);
    EXPECT_EQ(m.rows, kMinibatch);
    EXPECT_GE(m.correct, 0);
    EXPECT_LE(m.correct, kMinibatch);
  };
  tandem::Session session(f.model, std::move(o));
  const tandem::TrainResult r = session.run();

  EXPECT_EQ(r.minibatches, n);
  EXPECT_EQ(r.status, tandem::RunStatus::completed);
  ASSERT_EQ(r.losses.size(), static_cast<std::size_t>(n));
  std::multiset<std::int64_t> expected;
  for (std::int64_t b = 0; b < n; ++b) expected.insert(b);
  EXPECT_EQ(reported, expected);  // every minibatch once
  // The custom layer ran on stage 0 for every slice of every minibatch.
  EXPECT_EQ(f.custom->forwards.load(), n * plan.slices);
  EXPECT_EQ(f.custom->backwards.load(), n * plan.slices);
  EXPECT_LT(mean(r.losses, n - 10, n), 0.7 * mean(r.losses, 0, 10));
  ASSERT_EQ(r.stages.size(), 2u);
  EXPECT_EQ(r.stages[0].stage, 0);
  EXPECT_EQ(r.stages[1].stage, 1);
  EXPECT_GT(r.stages[1].actions, 0);
  // Three linear layers, a weight and a bias each.
  const std::vector<tandem::NamedTensor> w = session.weights();
  ASSERT_EQ(w.size(), 6u);
  EXPECT_EQ(w[0].name, "0.weight");
  EXPECT_EQ(w[0].value.shape(), (tandem::Shape{16, kFeatures}));
}

// Every minibatch that ran was reported, and none after the stop.
void expect_stopped_cleanly(const tandem::TrainResult& r, std::int64_t planned,
                            std::int64_t asked_after, std::int64_t reported) {
  EXPECT_EQ(r.status, tandem::RunStatus::stopped);
  EXPECT_GT(r.minibatches, asked_after);
  EXPECT_LT(r.minibatches, planned);
  EXPECT_EQ(r.losses.size(), static_cast<std::size_t>(r.minibatches));
  EXPECT_EQ(reported, r.minibatches);
}

TEST(EmbeddingApi, StopFromTheMetricsCallbackEndsTheRunEarly) {
  Fixture f;
  tandem::Plan plan =
      tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::one_f_one_b, kMinibatch, 4);
  const std::int64_t planned = 5000;
  tandem::TrainOptions o = options_for(plan, planned);
  tandem::Session* session = nullptr;
  std::atomic<std::int64_t> reported{0};
  o.on_metrics = [&](const tandem::Metrics& m) {
    ++reported;
    if (m.minibatch == 5) session->stop();
  };
  tandem::Session s(f.model, std::move(o));
  session = &s;
  const tandem::TrainResult r = s.run();
  expect_stopped_cleanly(r, planned, 5, reported.load());
}

TEST(EmbeddingApi, StopFromAnotherThreadEndsAnAsynchronousRun) {
  Fixture f;
  tandem::Plan plan =
      tandem::Plan::split_evenly(f.model, 3, tandem::Schedule::pipedream, kMinibatch);
  plan.stages[1].devices = {
      tandem::Device::cpu(),
      tandem::Device::cpu()};  // PipeDream stops at a multiple of the replicas
  const std::int64_t planned = 5000;
  tandem::TrainOptions o = options_for(plan, planned);
  std::mutex mu;
  std::condition_variable cv;
  std::int64_t reported = 0;
  bool done = false;
  o.on_metrics = [&](const tandem::Metrics&) {
    std::lock_guard lock(mu);
    if (++reported == 8) cv.notify_all();
  };
  tandem::Session session(f.model, std::move(o));
  std::thread watcher([&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return reported >= 8 || done; });
    lock.unlock();
    session.stop();
    session.stop();  // idempotent
  });
  tandem::TrainResult r;
  try {
    r = session.run();
  } catch (...) {
    {
      std::lock_guard lock(mu);
      done = true;
    }
    cv.notify_all();
    watcher.join();
    throw;
  }
  watcher.join();
  expect_stopped_cleanly(r, planned, 7, reported);
  EXPECT_EQ(r.minibatches % 2, 0);  // whole update rounds of the replicated stage
  ASSERT_EQ(r.stages.size(), 4u);
  EXPECT_EQ(r.stages[2].stage, 1);
  EXPECT_EQ(r.stages[2].replica, 1);
}

TEST(EmbeddingApi, StopBeforeTheRunRunsNothing) {
  Fixture f;
  tandem::TrainOptions o = options_for(
      tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::pipedream, kMinibatch), 1000);
  std::atomic<int> data_calls{0};
  o.data = [&](std::int64_t b) {
    ++data_calls;
    return make_batch(b);
  };
  tandem::Session s(f.model, std::move(o));
  s.stop();
  const tandem::TrainResult r = s.run();
  EXPECT_EQ(r.status, tandem::RunStatus::stopped);
  EXPECT_EQ(r.minibatches, 0);
  EXPECT_TRUE(r.losses.empty());
  EXPECT_EQ(data_calls.load(), 0);
  EXPECT_EQ(s.weights().size(), 6u);  // the initial weights
}

TEST(EmbeddingApi, StopAfterTheRunChangesNothing) {
  Fixture f;
  tandem::Session s(f.model, options_for(tandem::Plan::split_evenly(
                                             f.model, 2, tandem::Schedule::gpipe, kMinibatch, 2),
                                         4));
  const tandem::TrainResult r = s.run();
  s.stop();
  EXPECT_EQ(r.minibatches, 4);
  EXPECT_EQ(r.status, tandem::RunStatus::completed);
  EXPECT_THROW(s.run(), std::logic_error);
}

TEST(EmbeddingApi, BadPlansAreRefusedBeforeAnythingRuns) {
  Fixture f;
  std::atomic<int> data_calls{0};
  const auto refused = [&](tandem::TrainOptions o, const std::string& needle,
                           tandem::ErrorCode code = tandem::ErrorCode::plan) {
    o.data = [&](std::int64_t b) {
      ++data_calls;
      return make_batch(b);
    };
    try {
      tandem::Session s(f.model, std::move(o));
      ADD_FAILURE() << "accepted; wanted an error naming '" << needle << "'";
    } catch (const tandem::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(e.code(), code) << e.what();
    }
  };
  tandem::Plan gap;
  gap.stages = {{0, 2, {tandem::Device::cpu()}}, {3, 5, {tandem::Device::cpu()}}};
  gap.minibatch = kMinibatch;
  refused(options_for(gap, 4), "stage 1");

  tandem::Plan past = gap;
  past.stages[1] = {2, 6, {tandem::Device::cpu()}};
  refused(options_for(past, 4), "end at layer 6");

  tandem::Plan device = tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::gpipe, kMinibatch);
  device.stages[0].devices = {tandem::Device::cuda(1000)};
  refused(options_for(device, 4), "cuda:1000 does not exist");

  tandem::Plan no_replicas = device;
  no_replicas.stages[0].devices.clear();
  refused(options_for(no_replicas, 4), "plan.stages[0].devices");
  try {
    tandem::Session s(f.model, options_for(no_replicas, 4));
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.where().key, "plan.stages[0].devices");
  }

  tandem::Plan no_minibatch = tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::gpipe, 0);
  refused(options_for(no_minibatch, 4), "plan.minibatch");

  tandem::TrainOptions optimizer =
      options_for(tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::gpipe, kMinibatch), 4);
  optimizer.optimizer = tandem::SgdOptions{.lr = -1};
  refused(optimizer, "TrainOptions.optimizer.lr", tandem::ErrorCode::config);
  optimizer.optimizer = tandem::AdamWOptions{.beta2 = 1.5};
  refused(optimizer, "TrainOptions.optimizer.beta1/beta2", tandem::ErrorCode::config);
  EXPECT_EQ(data_calls.load(), 0);

  tandem::TrainOptions no_data =
      options_for(tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::gpipe, kMinibatch), 4);
  no_data.data = nullptr;
  try {
    tandem::Session s(f.model, std::move(no_data));
    ADD_FAILURE() << "accepted no DataFn";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::config) << e.what();
    EXPECT_EQ(e.where().key, "TrainOptions.data") << e.what();
  }
}

// Fetch I/O that waits until `stop` is stopped, or `limit` passes (none: forever).
void wait_for_io(const std::stop_token& stop,
                 std::chrono::milliseconds limit = std::chrono::milliseconds::max()) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  if (limit == std::chrono::milliseconds::max()) {
    cv.wait(lock, stop, [] { return false; });
  } else {
    cv.wait_for(lock, stop, limit, [] { return false; });
  }
}

// A callback blocked in I/O for a minibatch the run will not train: stop() stops its token, it
// returns an empty Batch at once, and the run ends before that minibatch.
TEST(EmbeddingApi, StopInterruptsABlockedDataCallbackThroughItsToken) {
  Fixture f;
  tandem::TrainOptions o = options_for(
      tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::gpipe, kMinibatch, 2), 1000);
  o.data = nullptr;
  std::atomic<bool> blocked{false}, interrupted{false};
  o.stoppable_data = [&](std::int64_t b, std::stop_token stop) {
    if (b < 3) return make_batch(b);
    blocked = true;
    wait_for_io(stop);  // I/O that never ends by itself
    interrupted = true;
    return tandem::Batch{};
  };
  tandem::Session s(f.model, std::move(o));
  const tandem::Run run = s.start();
  while (!blocked) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  run.stop();
  const tandem::TrainResult r = run.wait();
  EXPECT_TRUE(interrupted);
  EXPECT_EQ(r.status, tandem::RunStatus::stopped);
  EXPECT_EQ(r.minibatches, 3);  // the declined minibatch 3 and none after it
  EXPECT_EQ(r.losses.size(), 3u);
}

// Under PipeDream with a stage of 2 replicas a run stops only after an even number of
// minibatches: a fetch that stop point still needs keeps a live token and is waited for; the
// next one, not needed, is interrupted.
TEST(EmbeddingApi, AFetchTheStopPointNeedsIsNotInterrupted) {
  Fixture f;
  tandem::TrainOptions o = options_for(pipedream_2_1(), 1000);
  o.data = nullptr;
  std::atomic<bool> blocked{false};
  std::atomic<int> live_at_three{-1};
  o.stoppable_data = [&](std::int64_t b, std::stop_token stop) {
    if (b < 3) return make_batch(b);
    blocked = true;
    if (b == 3) {
      // Slow I/O that ends by itself; the stop arrives while it runs.
      wait_for_io(stop, std::chrono::milliseconds(300));
      live_at_three = stop.stop_requested() ? 0 : 1;
      return make_batch(b);
    }
    wait_for_io(stop);
    return tandem::Batch{};
  };
  tandem::Session s(f.model, std::move(o));
  const tandem::Run run = s.start();
  while (!blocked) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  run.stop();
  const tandem::TrainResult r = run.wait();
  EXPECT_EQ(live_at_three.load(), 1);
  EXPECT_EQ(r.status, tandem::RunStatus::stopped);
  EXPECT_EQ(r.minibatches, 4);
}

TEST(EmbeddingApi, AnEmptyBatchWithoutAStopAndTwoDataSourcesAreRefused) {
  Fixture f;
  const tandem::Plan plan =
      tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::gpipe, kMinibatch, 2);
  tandem::TrainOptions empty = options_for(plan, 4);
  empty.data = nullptr;
  empty.stoppable_data = [](std::int64_t b, std::stop_token) {
    return b < 2 ? make_batch(b) : tandem::Batch{};
  };
  tandem::Session s(f.model, std::move(empty));
  try {
    (void)s.run();
    ADD_FAILURE() << "an empty batch was trained";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::data) << e.what();
    EXPECT_NE(std::string(e.what()).find("DataFn(2)"), std::string::npos) << e.what();
  }
  tandem::TrainOptions both = options_for(plan, 4);
  both.stoppable_data = [](std::int64_t b, std::stop_token) { return make_batch(b); };
  try {
    tandem::Session twice(f.model, std::move(both));
    ADD_FAILURE() << "two data sources accepted";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.where().key, "TrainOptions.data") << e.what();
  }
}

// start(): the run goes on a thread of its own. wait_for times out while the DataFn holds the
// run, stop() through the handle ends it at a stop boundary, and wait() gives the result; a
// run that fails gives its Error; a Session destroyed while its run goes on stops it.
// Two sessions started at once on one Runtime of 2 threads: each trains exactly as it does
// alone on threads of its own, and at most 2 threads ran their stages at any moment.
TEST(EmbeddingApi, TwoSessionsSharingATwoThreadRuntimeTrainAsEachDoesAlone) {
  Fixture f;
  const tandem::Plan flush =
      tandem::Plan::split_evenly(f.model, 3, tandem::Schedule::one_f_one_b, kMinibatch, 4);
  const tandem::Plan async = pipedream_2_1();
  const auto alone = [&](const tandem::Plan& plan) {
    tandem::Session s(f.model, options_for(plan, 12));
    return s.run().losses;
  };
  const std::vector<double> flush_alone = alone(flush);
  const std::vector<double> async_alone = alone(async);

  const tandem::Runtime runtime(2);
  EXPECT_THROW(tandem::Runtime(0), std::invalid_argument);
  const auto shared = [&](const tandem::Plan& plan) {
    tandem::TrainOptions o = options_for(plan, 12);
    o.threads = 0;  // the runtime's
    o.runtime = runtime;
    return o;
  };
  tandem::Session a(f.model, shared(flush));
  tandem::Session b(f.model, shared(async));
  const tandem::Run ra = a.start();
  const tandem::Run rb = b.start();
  const tandem::TrainResult got_a = ra.wait();
  const tandem::TrainResult got_b = rb.wait();
  EXPECT_EQ(got_a.losses, flush_alone);
  EXPECT_EQ(got_b.losses, async_alone);
  EXPECT_EQ(runtime.threads(), 2u);
  EXPECT_GE(runtime.peak_threads_in_use(), 1u);
  EXPECT_LE(runtime.peak_threads_in_use(), 2u);
}

// Session::predict runs on the session's Runtime as its training does: its workers take turns
// on the runtime's one thread, and its outputs equal a session's on its own threads.
TEST(EmbeddingApi, PredictRunsOnTheSessionsRuntime) {
  Fixture f;
  const tandem::Plan plan =
      tandem::Plan::split_evenly(f.model, 3, tandem::Schedule::one_f_one_b, kMinibatch, 4);
  const tandem::Tensor x = make_batch(7).inputs;
  tandem::Session own(f.model, options_for(plan, 2));
  const tandem::Tensor expected = own.predict(x);

  const tandem::Runtime runtime(1);
  tandem::TrainOptions o = options_for(plan, 2);
  o.threads = 0;
  o.runtime = runtime;
  tandem::Session shared(f.model, o);
  EXPECT_EQ(runtime.peak_threads_in_use(), 0u);
  const tandem::Tensor got = shared.predict(x);
  EXPECT_EQ(runtime.peak_threads_in_use(), 1u);
  ASSERT_EQ(got.shape(), expected.shape());
  EXPECT_EQ(got.to_float_vector(), expected.to_float_vector());
}

TEST(EmbeddingApi, AStartedRunIsWaitedForWithATimeoutAndStoppedThroughItsHandle) {
  using namespace std::chrono_literals;
  Fixture f;
  const tandem::Plan plan =
      tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::gpipe, kMinibatch, 2);
  tandem::TrainOptions o = options_for(plan, 1000);
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  o.data = [&](std::int64_t b) {
    if (b == 3) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return open; });
    }
    return make_batch(b);
  };
  tandem::Session s(f.model, std::move(o));
  const tandem::Run run = s.start();
  EXPECT_FALSE(run.wait_for(50ms));  // held at minibatch 3
  run.stop();
  {
    std::lock_guard lock(mu);
    open = true;
  }
  cv.notify_all();
  ASSERT_TRUE(run.wait_for(60s));
  const tandem::TrainResult r = run.wait();
  EXPECT_EQ(r.status, tandem::RunStatus::stopped);
  EXPECT_GE(r.minibatches, 3);
  EXPECT_LT(r.minibatches, 1000);
  EXPECT_EQ(r.losses.size(), static_cast<std::size_t>(r.minibatches));
  EXPECT_EQ(run.wait().minibatches, r.minibatches);  // again, from the same result
  EXPECT_THROW((void)s.start(), std::logic_error);
  EXPECT_THROW((void)s.run(), std::logic_error);

  tandem::TrainOptions failing = options_for(plan, 8);
  failing.data = [](std::int64_t b) {
    if (b == 2) throw std::runtime_error("no minibatch 2");
    return make_batch(b);
  };
  tandem::Session bad(f.model, std::move(failing));
  try {
    (void)bad.start().wait();
    ADD_FAILURE() << "the DataFn's exception did not end the started run";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::data) << e.what();
  }

  // Destroyed while it runs (a million minibatches): the run stops and the destructor returns.
  std::atomic<std::int64_t> loaded{0};
  {
    tandem::TrainOptions long_run = options_for(plan, 1000000);
    long_run.data = [&](std::int64_t b) {
      ++loaded;
      return make_batch(b);
    };
    tandem::Session going(f.model, std::move(long_run));
    (void)going.start();
    while (loaded.load() < 4) std::this_thread::sleep_for(1ms);
  }
  EXPECT_LT(loaded.load(), 1000000);
}

// on_metrics and on_progress are called one at a time (never two at once), whichever library
// thread calls them.
TEST(EmbeddingApi, ProgressAndMetricsCallbacksAreSerialised) {
  Fixture f;
  tandem::TrainOptions o = options_for(
      tandem::Plan::split_evenly(f.model, 3, tandem::Schedule::one_f_one_b, kMinibatch, 4), 200);
  o.log_every = 1;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> calls{0};
  const auto enter = [&] {
    if (inside.fetch_add(1) != 0) ++overlaps;
    ++calls;
    std::this_thread::yield();
    inside.fetch_sub(1);
  };
  o.on_metrics = [&](const tandem::Metrics&) { enter(); };
  o.on_progress = [&](const tandem::Progress&) { enter(); };
  o.threads = 4;
  (void)tandem::Session(f.model, std::move(o)).run();
  EXPECT_GE(calls.load(), 400);
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(EmbeddingApi, DataOfTheWrongShapeIsNamedWithItsMinibatch) {
  Fixture f;
  tandem::TrainOptions o =
      options_for(tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::gpipe, kMinibatch), 4);
  o.data = [](std::int64_t b) {
    tandem::Batch batch = make_batch(b);
    if (b == 2) batch.inputs = tandem::Tensor::zeros({kMinibatch, kFeatures + 1});
    return batch;
  };
  tandem::Session s(f.model, std::move(o));
  try {
    (void)s.run();
    FAIL() << "a batch of the wrong shape was accepted";
  } catch (const tandem::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("DataFn(2)"), std::string::npos) << what;
    EXPECT_NE(what.find("[16, 9]"), std::string::npos) << what;
    EXPECT_EQ(e.code(), tandem::ErrorCode::data) << what;
    EXPECT_EQ(e.where().minibatch, 2) << what;
    // What ran before: at most minibatches 0 and 1.
    ASSERT_NE(e.partial(), nullptr);
    EXPECT_EQ(e.partial()->status, tandem::RunStatus::failed);
    EXPECT_LE(e.partial()->losses.size(), 2u);
    EXPECT_EQ(e.partial()->minibatches, static_cast<std::int64_t>(e.partial()->losses.size()));
  }
  // The failed run left no trained weights to give.
  try {
    (void)s.weights();
    ADD_FAILURE() << "weights of a failed run";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::stopped) << e.what();
  }
}

TEST(EmbeddingApi, ClassifierNamesTheLayerThatDoesNotFit) {
  try {
    (void)tandem::Model::classifier(
        kFeatures, {tandem::layers::linear(kFeatures, 16), tandem::layers::linear(12, kClasses)});
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)tandem::Model::classifier(kFeatures, {nullptr}), std::invalid_argument);
  EXPECT_THROW((void)tandem::Model::classifier(kFeatures, {}), std::invalid_argument);
}

TEST(EmbeddingApi, SplitEvenlyGivesTheRemainderToTheFirstStages) {
  Fixture f;
  const tandem::Plan p = tandem::Plan::split_evenly(f.model, 3, tandem::Schedule::gpipe, 8, 2);
  ASSERT_EQ(p.stages.size(), 3u);
  EXPECT_EQ(p.stages[0].begin, 0);
  EXPECT_EQ(p.stages[0].end, 2);
  EXPECT_EQ(p.stages[1].end, 4);
  EXPECT_EQ(p.stages[2].end, 5);
  EXPECT_EQ(p.slices, 2);
  EXPECT_THROW(tandem::Plan::split_evenly(f.model, 6, tandem::Schedule::gpipe, 8),
               std::invalid_argument);
  EXPECT_EQ(tandem::to_string(tandem::Schedule::one_f_one_b), "1f1b");
  EXPECT_FALSE(tandem::version().empty());
}

// A session built in code checkpoints and resumes as a config's job does: 8 minibatches with a
// checkpoint every 4, then a new session resumed from the step-4 checkpoint trains the last 4
// exactly (losses and weights), for a flush schedule and for PipeDream with a replicated stage.
TEST(EmbeddingApi, ACheckpointThenAResumeIsTheWholeRun) {
  Fixture f;
  const tandem::Plan pipedream = pipedream_2_1();
  for (const tandem::Plan& plan :
       {tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::one_f_one_b, kMinibatch, 4),
        pipedream}) {
    SCOPED_TRACE(std::string(tandem::to_string(plan.schedule)));
    const std::string dir = ::testing::TempDir() + "tandem-api-ck-" +
                            std::string(tandem::to_string(plan.schedule)) + "-" +
                            std::to_string(::getpid());
    tandem::TrainResult whole = tandem::Session(f.model, options_for(plan, 8)).run();
    tandem::TrainOptions first = options_for(plan, 8);
    first.checkpoints = {dir, 4, 2};
    const tandem::TrainResult a = tandem::Session(f.model, std::move(first)).run();
    ASSERT_EQ(a.checkpoints.size(), 2u);
    EXPECT_EQ(a.losses, whole.losses);
    EXPECT_EQ(a.weights_fingerprint, whole.weights_fingerprint);
    tandem::TrainOptions rest = options_for(plan, 8);
    rest.resume = a.checkpoints.front();
    const tandem::TrainResult b = tandem::Session(f.model, std::move(rest)).run();
    EXPECT_EQ(b.first_minibatch, 4);
    EXPECT_EQ(b.losses, std::vector<double>(whole.losses.begin() + 4, whole.losses.end()));
    EXPECT_EQ(b.weights_fingerprint, whole.weights_fingerprint);
    // Another model's checkpoint does not resume this one.
    tandem::TrainOptions other = options_for(plan, 8);
    other.resume = a.checkpoints.front();
    try {
      tandem::Session s(tandem::Model::mlp({kFeatures, 16, 16, 16, 16, kClasses}),
                        std::move(other));
      ADD_FAILURE() << "another model's checkpoint resumed";
    } catch (const tandem::Error& e) {
      EXPECT_EQ(e.code(), tandem::ErrorCode::checkpoint) << e.what();
    }
    std::filesystem::remove_all(dir);
  }
}

// A checkpoint records every layer: a model whose parameters all have the same shapes but whose
// one activation differs (GELU for ReLU) neither resumes it nor starts from its exported file.
TEST(EmbeddingApi, ACheckpointOfAModelWithAnotherActivationIsRefused) {
  const auto model_with = [](tandem::LayerPtr activation) {
    return tandem::Model::classifier(kFeatures, {tandem::layers::linear(kFeatures, 16), activation,
                                                 tandem::layers::linear(16, kClasses)});
  };
  const tandem::Model relu = model_with(tandem::layers::relu());
  const tandem::Model gelu = model_with(tandem::layers::gelu());
  const std::string dir =
      ::testing::TempDir() + "tandem-api-identity-" + std::to_string(::getpid());
  const tandem::Plan plan =
      tandem::Plan::split_evenly(relu, 2, tandem::Schedule::one_f_one_b, kMinibatch, 4);
  tandem::TrainOptions first = options_for(plan, 4);
  first.checkpoints = {dir + "/ck", 0, 2};
  ASSERT_EQ(tandem::Session(relu, std::move(first)).run().checkpoints.size(), 1u);

  tandem::TrainOptions same = options_for(plan, 8);
  same.resume = dir + "/ck";
  EXPECT_EQ(tandem::Session(relu, std::move(same)).run().first_minibatch, 4);
  tandem::TrainOptions other = options_for(plan, 8);
  other.resume = dir + "/ck";
  try {
    tandem::Session(gelu, std::move(other));
    ADD_FAILURE() << "a checkpoint of the ReLU model resumed the GELU model";
  } catch (const tandem::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), tandem::ErrorCode::checkpoint) << what;
    EXPECT_NE(what.find("layer 1: relu"), std::string::npos) << what;
    EXPECT_NE(what.find("layer 1: gelu"), std::string::npos) << what;
  }

  const std::string file = dir + "/model.safetensors";
  ASSERT_EQ(std::system((std::string(TANDEM_CLI) + " checkpoint export " + dir + "/ck -o " + file +
                         " >/dev/null")
                            .c_str()),
            0);
  tandem::TrainOptions from_file = options_for(plan, 2);
  from_file.init_from = file;
  try {
    tandem::Session(gelu, std::move(from_file));
    ADD_FAILURE() << "the ReLU model's exported file started the GELU model";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::checkpoint) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 1: gelu"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// PipeDream with replicas 2-1 stops (and resumes) only after an even number of minibatches: a
// checkpoint interval or a run length that is odd is refused when the session is made, with the
// even values beside it, instead of checkpointing at other steps or writing a last checkpoint
// that the same plan then refuses to resume.
TEST(EmbeddingApi, ACheckpointIntervalThePlanCannotStopAtIsRefusedWithTheNearestThatItCan) {
  Fixture f;
  const tandem::Plan pipedream = pipedream_2_1();
  const std::string dir = ::testing::TempDir() + "tandem-api-every-" + std::to_string(::getpid());
  const auto refusal = [&](std::int64_t minibatches, std::int64_t every) {
    tandem::TrainOptions o = options_for(pipedream, minibatches);
    o.checkpoints = {dir, every, 2};
    try {
      tandem::Session(f.model, std::move(o));
    } catch (const tandem::Error& e) {
      EXPECT_EQ(e.code(), tandem::ErrorCode::config) << e.what();
      EXPECT_EQ(e.where().key,
                every == 3 ? "TrainOptions.checkpoints.every" : "TrainOptions.minibatches");
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string every = refusal(8, 3);
  EXPECT_NE(every.find("TrainOptions.checkpoints.every: 3 steps"), std::string::npos) << every;
  EXPECT_NE(every.find("checkpoint every 2 or 4 steps"), std::string::npos) << every;
  const std::string steps = refusal(7, 2);
  EXPECT_NE(steps.find("TrainOptions.minibatches: a run of 7 steps"), std::string::npos) << steps;
  EXPECT_NE(steps.find("train 6 or 8 steps"), std::string::npos) << steps;
  EXPECT_FALSE(std::filesystem::exists(dir)) << "a refused session wrote checkpoints";
  // Without checkpoints an odd run is fine; so is an even interval of an even run, each
  // checkpoint then resumable by the same plan.
  EXPECT_EQ(tandem::Session(f.model, options_for(pipedream, 7)).run().minibatches, 7);
  tandem::TrainOptions even = options_for(pipedream, 8);
  even.checkpoints = {dir, 2, 0};
  const tandem::TrainResult r = tandem::Session(f.model, std::move(even)).run();
  ASSERT_EQ(r.checkpoints.size(), 4u);
  // keep = 0 keeps every checkpoint.
  std::size_t step_dirs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    step_dirs += entry.path().filename().string().rfind("step-", 0) == 0;
  }
  EXPECT_EQ(step_dirs, 4u);
  tandem::TrainOptions rest = options_for(pipedream, 8);
  rest.resume = r.checkpoints[1];
  EXPECT_EQ(tandem::Session(f.model, std::move(rest)).run().first_minibatch, 4);
  std::filesystem::remove_all(dir);
}

// A service that runs inside a launcher's environment (a Slurm step, a torchrun worker) runs
// alone unless its options ask to join: the variables of a job of two processes change nothing
// with the default Launch::local(). Launch::rank() is checked when the session is made.
TEST(EmbeddingApi, ALocalLaunchRunsAloneWhateverTheEnvironmentSays) {
  Fixture f;
  const tandem::Plan plan =
      tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::one_f_one_b, kMinibatch, 4);
  const tandem::TrainResult alone = tandem::Session(f.model, options_for(plan, 4)).run();
  const std::vector<std::pair<const char*, const char*>> vars = {{"TANDEM_RANK", "1"},
                                                                 {"TANDEM_WORLD_SIZE", "2"},
                                                                 {"TANDEM_MASTER", "127.0.0.1:1"},
                                                                 {"RANK", "1"},
                                                                 {"WORLD_SIZE", "2"},
                                                                 {"MASTER_ADDR", "127.0.0.1"},
                                                                 {"MASTER_PORT", "1"},
                                                                 {"SLURM_PROCID", "1"},
                                                                 {"SLURM_NTASKS", "2"},
                                                                 {"OMPI_COMM_WORLD_RANK", "1"},
                                                                 {"OMPI_COMM_WORLD_SIZE", "2"}};
  for (const auto& [name, value] : vars) ::setenv(name, value, 1);
  tandem::TrainResult r;
  try {
    r = tandem::Session(f.model, options_for(plan, 4)).run();
  } catch (...) {
    for (const auto& [name, value] : vars) ::unsetenv(name);
    throw;
  }
  for (const auto& [name, value] : vars) ::unsetenv(name);
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.processes, 1);
  EXPECT_EQ(r.losses, alone.losses);
  EXPECT_EQ(r.weights_fingerprint, alone.weights_fingerprint);

  const auto refusal = [&](tandem::Launch launch) {
    tandem::TrainOptions o = options_for(plan, 4);
    o.launch = std::move(launch);
    try {
      tandem::Session(f.model, std::move(o));
    } catch (const tandem::Error& e) {
      EXPECT_EQ(e.code(), tandem::ErrorCode::config) << e.what();
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(tandem::Launch::rank(2, 2, "127.0.0.1:29500"))
                .find("TrainOptions.launch: rank 2 of 2 processes"),
            std::string::npos);
  EXPECT_NE(refusal(tandem::Launch::rank(0, 0, "127.0.0.1:29500")).find("TrainOptions.launch"),
            std::string::npos);
  EXPECT_NE(refusal(tandem::Launch::rank(1, 2, "no port")).find("TrainOptions.launch: "),
            std::string::npos);
  // A master that may be on another host needs the job's token.
  EXPECT_NE(refusal(tandem::Launch::rank(1, 2, "10.0.0.1:29500")).find("TrainOptions.launch: "),
            std::string::npos);
}

// A session built in code starts from a whole-model file (`tandem checkpoint export` of its
// own checkpoint) under another plan; a file of another model is refused at
// TrainOptions.init_from.
TEST(EmbeddingApi, InitFromStartsFromAnExportedModelFile) {
  Fixture f;
  const std::string dir =
      ::testing::TempDir() + "tandem-api-init-from-" + std::to_string(::getpid());
  const tandem::Plan two =
      tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::one_f_one_b, kMinibatch, 4);
  tandem::TrainOptions first = options_for(two, 4);
  first.checkpoints = {dir + "/ck", 0, 2};
  const tandem::TrainResult a = tandem::Session(f.model, std::move(first)).run();
  ASSERT_EQ(a.checkpoints.size(), 1u);
  const std::string file = dir + "/model.safetensors";
  ASSERT_EQ(std::system((std::string(TANDEM_CLI) + " checkpoint export " + dir + "/ck -o " + file +
                         " >/dev/null")
                            .c_str()),
            0);

  const tandem::Plan three =
      tandem::Plan::split_evenly(f.model, 3, tandem::Schedule::gpipe, kMinibatch, 4);
  const tandem::TrainResult fresh = tandem::Session(f.model, options_for(three, 2)).run();
  tandem::TrainOptions from_file = options_for(three, 2);
  from_file.init_from = file;
  const tandem::TrainResult b = tandem::Session(f.model, std::move(from_file)).run();
  tandem::TrainOptions on_two = options_for(two, 2);
  on_two.init_from = file;
  const tandem::TrainResult c = tandem::Session(f.model, std::move(on_two)).run();
  // Minibatch 0's loss is that of the exported weights under either plan, not the fresh start's.
  ASSERT_EQ(b.losses.size(), 2u);
  ASSERT_EQ(c.losses.size(), 2u);
  EXPECT_NEAR(b.losses.front(), c.losses.front(), 1e-6 * std::abs(c.losses.front()));
  EXPECT_NE(b.losses.front(), fresh.losses.front());

  tandem::TrainOptions other = options_for(three, 2);
  other.init_from = file;
  try {
    tandem::Session(tandem::Model::mlp({kFeatures, 16, 16, 16, 16, kClasses}), std::move(other));
    ADD_FAILURE() << "another model's file was accepted";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::checkpoint) << e.what();
    EXPECT_NE(std::string(e.what()).find("TrainOptions.init_from: " + file), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// Held-out evaluation of the application's data every 4 minibatches and after the last, on the
// weights of that step: the step-4 figures are those of a run that ends at step 4.
TEST(EmbeddingApi, EvaluatesHeldOutDataEveryNMinibatches) {
  Fixture f;
  const tandem::Plan plan =
      tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::one_f_one_b, kMinibatch, 4);
  const auto held_out = [](std::int64_t k) { return make_batch(1000 + k); };
  tandem::TrainOptions o = options_for(plan, 8);
  o.eval_data = held_out;
  o.eval_minibatches = 3;
  o.eval_every = 4;
  std::vector<tandem::Progress> records;
  o.on_progress = [&](const tandem::Progress& p) { records.push_back(p); };
  const tandem::TrainResult r = tandem::Session(f.model, std::move(o)).run();
  ASSERT_TRUE(r.has_eval);
  EXPECT_EQ(r.eval.samples, 3 * kMinibatch);
  std::vector<tandem::Progress> evaluated;
  for (const tandem::Progress& p : records) {
    if (p.has_eval) evaluated.push_back(p);
  }
  ASSERT_EQ(evaluated.size(), 2u);
  EXPECT_EQ(evaluated[0].step, 4);
  EXPECT_EQ(evaluated[1].step, 8);
  EXPECT_EQ(evaluated[1].eval.loss, r.eval.loss);
  tandem::TrainOptions four = options_for(plan, 4);
  four.eval_data = held_out;
  four.eval_minibatches = 3;
  const tandem::TrainResult at4 = tandem::Session(f.model, std::move(four)).run();
  ASSERT_TRUE(at4.has_eval);
  EXPECT_EQ(evaluated[0].eval.loss, at4.eval.loss);
  EXPECT_EQ(evaluated[0].eval.accuracy, at4.eval.accuracy);
  // A held-out batch of the wrong shape is named.
  tandem::TrainOptions bad = options_for(plan, 4);
  bad.eval_data = [](std::int64_t) {
    return tandem::Batch{tandem::Tensor::zeros({kMinibatch, kFeatures + 1}),
                         tandem::Tensor::zeros({kMinibatch}, tandem::DType::i32)};
  };
  bad.eval_minibatches = 1;
  try {
    tandem::Session(f.model, std::move(bad)).run();
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("eval_data(0)"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// make_batch(b) stacked for b in [first, first + k): one device's minibatch of k times the rows.
tandem::Batch stacked_batch(std::int64_t first, std::int64_t k) {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (std::int64_t i = 0; i < k; ++i) {
    const tandem::Batch b = make_batch(first + i);
    const float* xs = b.inputs.data<float>();
    const std::int32_t* ys = b.targets.data<std::int32_t>();
    x.insert(x.end(), xs, xs + b.inputs.numel());
    y.insert(y.end(), ys, ys + b.targets.numel());
  }
  return {tandem::Tensor::from_vector(x, {k * kMinibatch, kFeatures}),
          tandem::Tensor::from_vector(y, {k * kMinibatch})};
}

struct ApiRun {
  std::vector<tandem::NamedTensor> weights;
  std::vector<double> norms;
};

ApiRun run_api(tandem::TrainOptions o) {
  Fixture f;
  std::mutex mu;
  std::vector<double> norms(static_cast<std::size_t>(o.minibatches), -1);
  o.on_metrics = [&](const tandem::Metrics& m) {
    std::lock_guard lock(mu);
    EXPECT_TRUE(m.has_grad_norm);
    norms.at(static_cast<std::size_t>(m.minibatch)) = m.grad_norm;
  };
  tandem::Session session(f.model, std::move(o));
  (void)session.run();
  return {session.weights(), norms};
}

}  // namespace

// TrainOptions::accumulate asks `data` for k minibatches per update and equals one device on
// their k-times minibatch; TrainOptions::clip_grad_norm clips and reports the norm per update.
TEST(EmbeddingApi, AccumulationAndClippingEqualOneDevice) {
  constexpr std::int64_t k = 3;
  tandem::Plan plan;
  plan.stages = {{0, 2, {tandem::Device::cpu()}}, {2, 5, {tandem::Device::cpu()}}};
  plan.schedule = tandem::Schedule::one_f_one_b;
  plan.minibatch = kMinibatch;
  plan.slices = 2;
  tandem::TrainOptions o = options_for(plan, 4);
  o.accumulate = k;
  o.clip_grad_norm = 0.1;
  const ApiRun got = run_api(std::move(o));

  tandem::Plan one;
  one.stages = {{0, 5, {tandem::Device::cpu()}}};
  one.schedule = tandem::Schedule::gpipe;
  one.minibatch = k * kMinibatch;
  tandem::TrainOptions w = options_for(one, 4);
  w.data = [](std::int64_t b) { return stacked_batch(b * k, k); };
  w.clip_grad_norm = 0.1;
  const ApiRun want = run_api(std::move(w));

  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (std::size_t i = 0; i < want.weights.size(); ++i) {
    const tandem::Tensor& a = got.weights[i].value;
    const tandem::Tensor& b = want.weights[i].value;
    ASSERT_EQ(a.numel(), b.numel());
    for (std::int64_t j = 0; j < a.numel(); ++j) {
      EXPECT_NEAR(a.data<float>()[j], b.data<float>()[j], 1e-6) << want.weights[i].name;
    }
  }
  for (std::size_t i = 0; i < want.norms.size(); ++i) {
    EXPECT_GT(want.norms[i], 0.1) << "the clip acts";
    EXPECT_NEAR(got.norms[i], want.norms[i], 1e-6 * want.norms[i]) << "update " << i;
  }
}

TEST(EmbeddingApi, AccumulationAndClippingRefuseBadValues) {
  Fixture f;
  tandem::TrainOptions o = options_for(
      tandem::Plan::split_evenly(f.model, 2, tandem::Schedule::one_f_one_b, kMinibatch), 2);
  const auto refused_key = [&](const tandem::TrainOptions& bad) {
    try {
      tandem::Session s(f.model, bad);
    } catch (const tandem::Error& e) {
      EXPECT_EQ(e.code(), tandem::ErrorCode::config) << e.what();
      return e.where().key;
    }
    return std::string("accepted");
  };
  o.accumulate = 0;
  EXPECT_EQ(refused_key(o), "TrainOptions.accumulate");
  o.accumulate = 1;
  for (const double bad : {-1.0, std::nan(""), HUGE_VAL}) {
    o.clip_grad_norm = bad;
    EXPECT_EQ(refused_key(o), "TrainOptions.clip_grad_norm") << bad;
  }
}
