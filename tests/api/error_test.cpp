// tandem::Error as an application meets it: each failure of a Session has its code and says
// where it sits (stage, replica, minibatch, key), and a run that fails hands back what it did
// before (the minibatches' losses, the checkpoints written), through the public header only.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "free_port.hpp"
#include "tandem/tandem.hpp"

namespace {

constexpr std::int64_t kFeatures = 8;
constexpr std::int64_t kClasses = 3;
constexpr std::int64_t kMinibatch = 16;

constexpr float kMarker = 1000.0f;  // minibatch kFailingMinibatch's first input
constexpr std::int64_t kFailingMinibatch = 3;

// y = x; a training forward of a batch whose first value is kMarker throws, as an
// application's layer does when its own check fails.
class FailingIdentity final : public tandem::Layer {
 public:
  std::string kind() const override { return "failing_identity"; }
  std::string describe() const override { return "failing_identity"; }
  tandem::Shape output_shape(const tandem::Shape& input) const override { return input; }
  tandem::ForwardResult forward(const tandem::LayerContext& ctx, tandem::ParamView,
                                const tandem::Tensor& x) const override {
    if (ctx.keep_saved && x.data<float>()[0] == kMarker) {
      throw std::runtime_error("the layer's own check");
    }
    return {x.clone(), {}};
  }
  tandem::Tensor backward_input(const tandem::LayerContext&, tandem::ParamView, tandem::Saved&,
                                const tandem::Tensor& dy) const override {
    return dy.clone();
  }
};

tandem::Batch make_batch(std::int64_t b) {
  std::vector<float> x(static_cast<std::size_t>(kMinibatch * kFeatures));
  std::vector<std::int32_t> y(static_cast<std::size_t>(kMinibatch));
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(b) * 13) % 19) / 9.0f - 1.0f;
  }
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int32_t>(i % kClasses);
  if (b == kFailingMinibatch) x[0] = kMarker;
  return {tandem::Tensor::from_vector(x, {kMinibatch, kFeatures}),
          tandem::Tensor::from_vector(y, {kMinibatch})};
}

// flatten (a copy) | failing identity, linear, relu, linear: two stages, so the identity runs on
// stage 1.
tandem::Model model_with(tandem::LayerPtr second) {
  return tandem::Model::classifier(
      kFeatures,
      {tandem::layers::flatten(), std::move(second), tandem::layers::linear(kFeatures, 16),
       tandem::layers::relu(), tandem::layers::linear(16, kClasses)});
}

tandem::TrainOptions options(const tandem::Model& model, std::int64_t minibatches) {
  tandem::TrainOptions o;
  o.plan = tandem::Plan::split_evenly(model, 2, tandem::Schedule::one_f_one_b, kMinibatch, 1);
  o.plan.stages[0].end = 1;
  o.plan.stages[1].begin = 1;
  o.minibatches = minibatches;
  o.optimizer = tandem::SgdOptions{.lr = 0.05};
  o.data = make_batch;
  o.threads = 2;
  return o;
}

std::string temp_dir(const std::string& name) {
  return ::testing::TempDir() + "tandem-error-" + name + "-" + std::to_string(::getpid());
}

TEST(ApiErrors, EveryCodeHasItsName) {
  const std::vector<std::pair<tandem::ErrorCode, std::string>> names = {
      {tandem::ErrorCode::config, "config"},         {tandem::ErrorCode::plan, "plan"},
      {tandem::ErrorCode::checkpoint, "checkpoint"}, {tandem::ErrorCode::data, "data"},
      {tandem::ErrorCode::layer, "layer"},           {tandem::ErrorCode::lost_rank, "lost_rank"},
      {tandem::ErrorCode::stalled, "stalled"},       {tandem::ErrorCode::diverged, "diverged"},
      {tandem::ErrorCode::stopped, "stopped"},       {tandem::ErrorCode::internal, "internal"}};
  std::set<std::string> seen;
  for (const auto& [code, name] : names) {
    EXPECT_EQ(tandem::error_code_name(code), name);
    seen.insert(std::string(tandem::error_code_name(code)));
  }
  EXPECT_EQ(seen.size(), names.size());
}

// A layer that throws in minibatch 3's forward: ErrorCode::layer naming stage 1, replica 0 and
// minibatch 3, with the run before it (the checkpoint after minibatch 2, the losses of the
// minibatches that completed) in partial().
TEST(ApiErrors, ALayersExceptionNamesItsStageAndMinibatchAndKeepsWhatRanBefore) {
  const tandem::Model model = model_with(std::make_shared<FailingIdentity>());
  const std::string dir = temp_dir("layer");
  tandem::TrainOptions o = options(model, 6);
  o.checkpoints = {dir, 2, 0};
  tandem::Session s(model, std::move(o));
  try {
    (void)s.run();
    FAIL() << "the layer's exception did not end the run";
  } catch (const tandem::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), tandem::ErrorCode::layer) << what;
    EXPECT_EQ(e.where().stage, 1) << what;
    EXPECT_EQ(e.where().replica, 0) << what;
    EXPECT_EQ(e.where().minibatch, 3) << what;
    EXPECT_FALSE(e.where().rank.has_value()) << what;
    EXPECT_NE(what.find("the layer's own check"), std::string::npos) << what;
    ASSERT_NE(e.partial(), nullptr);
    const tandem::TrainResult& partial = *e.partial();
    EXPECT_EQ(partial.status, tandem::RunStatus::failed);
    ASSERT_EQ(partial.checkpoints.size(), 1u);
    EXPECT_TRUE(std::filesystem::exists(partial.checkpoints.front())) << partial.checkpoints[0];
    // Minibatches 0 and 1 completed (the checkpoint after them needs them), perhaps 2; 3
    // never did.
    EXPECT_GE(partial.losses.size(), 2u);
    EXPECT_LE(partial.losses.size(), 3u);
    EXPECT_EQ(partial.minibatches, static_cast<std::int64_t>(partial.losses.size()));
    for (const double l : partial.losses) EXPECT_TRUE(std::isfinite(l)) << l;
  }
  // The failed run's checkpoint resumes (with data the layer accepts).
  tandem::TrainOptions again = options(model, 6);
  again.resume = dir;
  again.data = [](std::int64_t b) { return make_batch(b == kFailingMinibatch ? b + 100 : b); };
  const tandem::TrainResult r = tandem::Session(model, std::move(again)).run();
  EXPECT_EQ(r.first_minibatch, 2);
  EXPECT_EQ(r.status, tandem::RunStatus::completed);
  std::filesystem::remove_all(dir);
}

// A loss that becomes infinite: ErrorCode::diverged at the minibatch where it did.
TEST(ApiErrors, ALossThatIsNotFiniteIsDiverged) {
  const tandem::Model model = model_with(tandem::layers::relu());
  tandem::TrainOptions o = options(model, 6);
  o.data = [](std::int64_t b) {
    tandem::Batch batch = make_batch(b);
    if (b == 4) batch.inputs.fill(std::numeric_limits<float>::infinity());
    return batch;
  };
  try {
    (void)tandem::Session(model, std::move(o)).run();
    FAIL() << "an infinite loss did not end the run";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::diverged) << e.what();
    EXPECT_EQ(e.where().minibatch, 4) << e.what();
    ASSERT_NE(e.partial(), nullptr);
    EXPECT_EQ(e.partial()->status, tandem::RunStatus::failed);
  }
}

// A DataFn that throws: ErrorCode::data naming the minibatch, its own message kept.
TEST(ApiErrors, ADataFnThatThrowsIsAData) {
  const tandem::Model model = model_with(tandem::layers::relu());
  tandem::TrainOptions o = options(model, 6);
  o.data = [](std::int64_t b) {
    if (b == 1) throw std::runtime_error("the reader's disk is gone");
    return make_batch(b);
  };
  try {
    (void)tandem::Session(model, std::move(o)).run();
    FAIL() << "the DataFn's exception did not end the run";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::data) << e.what();
    EXPECT_EQ(e.where().minibatch, 1) << e.what();
    EXPECT_NE(std::string(e.what()).find("the reader's disk is gone"), std::string::npos);
  }
}

// y = x; minibatch kFailingMinibatch's training forward takes 2 s, as a layer stuck in I/O or
// a kernel does.
class SlowIdentity final : public tandem::Layer {
 public:
  std::string kind() const override { return "slow_identity"; }
  std::string describe() const override { return "slow_identity"; }
  tandem::Shape output_shape(const tandem::Shape& input) const override { return input; }
  tandem::ForwardResult forward(const tandem::LayerContext& ctx, tandem::ParamView,
                                const tandem::Tensor& x) const override {
    if (ctx.keep_saved && x.data<float>()[0] == kMarker) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    return {x.clone(), {}};
  }
  tandem::Tensor backward_input(const tandem::LayerContext&, tandem::ParamView, tandem::Saved&,
                                const tandem::Tensor& dy) const override {
    return dy.clone();
  }
};

// Ranks 0 and 1 of a job, sessions on two threads of this process; rank 1 runs stage 1, whose
// layer holds minibatch 3 for 2 s against a stall timeout of 0.5 s. Rank 0's run ends with
// ErrorCode::stalled naming rank 1; rank 1's own run ends so too, and its process (this one)
// goes on: the exit that ends a stalled rank whose pipeline never stops is called off once it
// has stopped.
TEST(ApiErrors, ARankThatHoldsItsWorkTooLongIsStalledAndItsProcessGoesOn) {
  const tandem::Model model = model_with(std::make_shared<SlowIdentity>());
  const std::string master = "127.0.0.1:" + std::to_string(tandem::api_test::free_port());
  const auto run_rank = [&](int rank, std::string& failure) {
    tandem::TrainOptions o = options(model, 8);
    o.launch = tandem::Launch::rank(rank, 2, master, "error-test-token");
    o.cluster.stall_timeout_s = 0.5;
    o.threads = 1;
    try {
      (void)tandem::Session(model, std::move(o)).run();
      failure = "completed";
    } catch (const tandem::Error& e) {
      failure = std::string(tandem::error_code_name(e.code())) + " rank " +
                (e.where().rank ? std::to_string(*e.where().rank) : "?") + ": " + e.what();
    }
  };
  std::string zero, one;
  std::thread second([&] { run_rank(1, one); });
  run_rank(0, zero);
  second.join();
  EXPECT_EQ(zero.rfind("stalled rank 1: ", 0), 0u) << zero;
  EXPECT_EQ(one.rfind("stalled rank 1: ", 0), 0u) << one;
  // Past the grace (10 s from the notice) after which a stalled rank's process ends itself.
  std::this_thread::sleep_for(std::chrono::seconds(11));
  SUCCEED() << "this process outlived the grace";
}

// Options that cannot be, a plan that cannot run and a checkpoint that is not one are told
// apart before anything runs.
TEST(ApiErrors, ConfigPlanAndCheckpointAreToldApartAtConstruction) {
  const tandem::Model model = model_with(tandem::layers::relu());
  const auto code_of = [&](tandem::TrainOptions o) {
    try {
      tandem::Session s(model, std::move(o));
    } catch (const tandem::Error& e) {
      return std::pair(e.code(), e.where().key);
    }
    return std::pair(tandem::ErrorCode::internal, std::string("accepted"));
  };
  tandem::TrainOptions seeds = options(model, 4);
  seeds.log_every = 0;
  EXPECT_EQ(code_of(seeds),
            std::pair(tandem::ErrorCode::config, std::string("TrainOptions.log_every")));
  tandem::TrainOptions gpu = options(model, 4);
  gpu.plan.stages[1].devices = {tandem::Device::cuda(99)};
  EXPECT_EQ(code_of(gpu),
            std::pair(tandem::ErrorCode::plan, std::string("plan.stages[1].devices[0]")));
  tandem::TrainOptions resume = options(model, 4);
  resume.resume = temp_dir("none");
  EXPECT_EQ(code_of(resume).first, tandem::ErrorCode::checkpoint);
  tandem::TrainOptions init = options(model, 4);
  init.init_from = temp_dir("none") + ".safetensors";
  EXPECT_EQ(code_of(init),
            std::pair(tandem::ErrorCode::checkpoint, std::string("TrainOptions.init_from")));
  // The training library's own checks, in the API's words.
  tandem::TrainOptions every = options(model, 4);
  every.checkpoints = {temp_dir("every"), -1, 2};
  EXPECT_EQ(code_of(every),
            std::pair(tandem::ErrorCode::config, std::string("TrainOptions.checkpoints.every")));
  tandem::TrainOptions keep = options(model, 4);
  keep.checkpoints = {temp_dir("keep"), 2, -1};
  EXPECT_EQ(code_of(keep),
            std::pair(tandem::ErrorCode::config, std::string("TrainOptions.checkpoints.keep")));
}

}  // namespace
