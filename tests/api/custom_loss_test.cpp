// Losses through the public API: a code-built model under mse with f32 targets, an
// application's own loss (tandem::Loss) that trains a small regression, its results refused
// with errors naming it when they do not fit, and targets of the wrong dtype refused at the
// data function.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "api_test_util.hpp"
#include "tandem/tandem.hpp"

namespace {

constexpr std::int64_t kIn = 6;
constexpr std::int64_t kOut = 3;
constexpr std::int64_t kBatch = 32;

// 0.5 (x - t)^2 per element, through the kernels only, so it runs on any device.
class HalfSquaredError final : public tandem::Loss {
 public:
  std::string describe() const override { return "half_squared_error"; }
  tandem::Tensor value(const tandem::LayerContext& ctx, const tandem::Tensor& output,
                       const tandem::Tensor& targets) const override {
    const tandem::Tensor d = difference(ctx, output, targets);
    tandem::Tensor v = ctx.k().empty(output.shape());
    ctx.k().multiply(d, d, 0.5f, 0.0f, v);
    return v;
  }
  tandem::Tensor gradient(const tandem::LayerContext& ctx, const tandem::Tensor& output,
                          const tandem::Tensor& targets) const override {
    return difference(ctx, output, targets);
  }

 private:
  static tandem::Tensor difference(const tandem::LayerContext& ctx, const tandem::Tensor& x,
                                   const tandem::Tensor& t) {
    tandem::Tensor minus_t = ctx.k().empty(t.shape());
    ctx.k().copy(t, minus_t);
    ctx.k().scale(minus_t, -1.0f);
    tandem::Tensor d = ctx.k().empty(x.shape());
    ctx.k().add(x, minus_t, d);
    return d;
  }
};

// Gives values of the wrong count: refused with the loss's name.
class WrongValue final : public tandem::Loss {
 public:
  std::string describe() const override { return "wrong_value"; }
  tandem::Tensor value(const tandem::LayerContext& ctx, const tandem::Tensor&,
                       const tandem::Tensor&) const override {
    return ctx.k().zeros({1});
  }
  tandem::Tensor gradient(const tandem::LayerContext& ctx, const tandem::Tensor& output,
                          const tandem::Tensor&) const override {
    return ctx.k().zeros(output.shape());
  }
};

// Inputs from a fixed linear map with a kink: a two-layer MLP fits it closely.
tandem::Batch regression_batch(std::int64_t b) {
  std::vector<float> x(static_cast<std::size_t>(kBatch * kIn)), y(kBatch * kOut);
  std::uint64_t s = 1469598103934665603ULL ^ static_cast<std::uint64_t>(b);
  auto next = [&] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((s >> 33) % 2001) / 1000.0f - 1.0f;
  };
  for (float& v : x) v = next();
  for (std::int64_t r = 0; r < kBatch; ++r) {
    for (std::int64_t o = 0; o < kOut; ++o) {
      float acc = 0;
      for (std::int64_t i = 0; i < kIn; ++i) {
        acc += x[r * kIn + i] * static_cast<float>((i + 2 * o) % 5 - 2) * 0.5f;
      }
      y[r * kOut + o] = std::max(acc, 0.0f);
    }
  }
  return {tandem::Tensor::from_vector(x, {kBatch, kIn}),
          tandem::Tensor::from_vector(y, {kBatch, kOut})};
}

tandem::TrainResult train(const tandem::Model& model, std::int64_t minibatches,
                          tandem::DataFn data = regression_batch) {
  tandem::TrainOptions o;
  o.plan = tandem::Plan::split_evenly(model, 2, tandem::Schedule::one_f_one_b, kBatch, 2);
  o.minibatches = minibatches;
  o.optimizer = tandem::AdamWOptions{.lr = 1e-2};
  o.seed = 3;
  o.data = std::move(data);
  tandem::Session session(model, std::move(o));
  return session.run();
}

tandem::Model mlp() {
  return tandem::Model::mlp({kIn, 32, kOut});
}

TEST(CustomLoss, TrainsASmallRegression) {
  const tandem::Model model = mlp().with_loss(std::make_shared<HalfSquaredError>());
  EXPECT_EQ(model.target_dtype(), tandem::DType::f32);
  EXPECT_EQ(model.target_shape(kBatch), (tandem::Shape{kBatch, kOut}));
  const tandem::TrainResult r = train(model, 300);
  ASSERT_EQ(r.losses.size(), 300u);
  EXPECT_LT(r.losses.back(), 0.1 * r.losses.front());
}

// The first minibatch's loss is computed on the initial weights: half the built-in mse's.
TEST(CustomLoss, ValueIsAddedUpLikeTheBuiltInLosses) {
  const double custom = train(mlp().with_loss(std::make_shared<HalfSquaredError>()), 1).losses[0];
  const double mse = train(mlp().with_loss("mse"), 1).losses[0];
  EXPECT_NEAR(custom, 0.5 * mse, 1e-6 * mse);
}

TEST(CustomLoss, BuiltInRegressionLossesTrainFromCode) {
  const tandem::TrainResult r = train(mlp().with_loss("mse"), 300);
  EXPECT_LT(r.losses.back(), 0.1 * r.losses.front());
  EXPECT_THROW(mlp().with_loss("hinge"), std::invalid_argument);
  EXPECT_THROW(mlp().with_loss(tandem::LossPtr()), std::invalid_argument);
}

std::string run_error(const tandem::Model& model, tandem::DataFn data = regression_batch) {
  try {
    train(model, 1, std::move(data));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(CustomLoss, ResultsThatDoNotFitAreRefusedNamingTheLoss) {
  const std::string e = run_error(mlp().with_loss(std::make_shared<WrongValue>()));
  EXPECT_NE(e.find("loss wrong_value value: gave"), std::string::npos) << e;
  // A slice of 16 samples of 3 outputs.
  EXPECT_NE(e.find("wants f32 of 48 values"), std::string::npos) << e;
}

TEST(CustomLoss, TargetsOfTheWrongDtypeAreRefusedAtTheDataFunction) {
  const auto ids = [](std::int64_t b) {
    tandem::Batch batch = regression_batch(b);
    batch.targets = tandem::Tensor::from_vector(std::vector<std::int32_t>(kBatch, 0), {kBatch});
    return batch;
  };
  const std::string e = run_error(mlp().with_loss("mse"), ids);
  EXPECT_NE(e.find("DataFn(0): targets"), std::string::npos) << e;
  EXPECT_NE(e.find("the loss mse takes f32[32, 3]"), std::string::npos) << e;
  // ... and f32 targets under cross-entropy.
  const std::string ce = run_error(mlp());
  EXPECT_NE(ce.find("the loss cross_entropy takes i32[32]"), std::string::npos) << ce;
}

}  // namespace
