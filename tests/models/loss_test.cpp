// The losses (models/losses/): each one's value and gradient against a plain double loop, its
// gradient against central differences, cross-entropy unchanged bit for bit behind the Loss
// interface, binary cross-entropy finite at large logits, and targets that do not fit refused
// with an error naming the loss, the targets and what it wants.
#include "models/loss.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "models/executor.hpp"
#include "models/model.hpp"

namespace tandem::models {
namespace {

Tensor random_f32(const Shape& shape, std::uint32_t seed, float lo, float hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (float& x : v) x = d(g);
  return Tensor::from_vector(v, shape);
}

double plain_element(const std::string& loss, double x, double t) {
  if (loss == "mse") return (x - t) * (x - t);
  // The naive form, in double: fine for the moderate logits it is compared at.
  const double p = 1.0 / (1.0 + std::exp(-x));
  return -(t * std::log(p) + (1 - t) * std::log(1 - p));
}

double plain_grad(const std::string& loss, double x, double t) {
  if (loss == "mse") return 2 * (x - t);
  return 1.0 / (1.0 + std::exp(-x)) - t;
}

class ElementwiseLosses : public ::testing::TestWithParam<std::string> {};

TEST_P(ElementwiseLosses, ValueAndGradientMatchAPlainDoubleLoop) {
  const LossPtr loss = make_loss(GetParam());
  EXPECT_FALSE(loss->classifies());
  EXPECT_EQ(loss->target_dtype(), DType::f32);
  const Tensor x = random_f32({6, 3}, 1, -4, 4);
  const Tensor t = random_f32({6, 3}, 2, 0, 1);
  const float scale = 1.0f / 40;  // as if this slice were part of a minibatch of 40 elements
  const LossResult r = loss->compute(Context{}, x, t, true, scale);
  EXPECT_EQ(r.count, 18);
  EXPECT_EQ(r.correct, 0);
  double want = 0;
  for (std::int64_t i = 0; i < 18; ++i) {
    const double xi = x.data<float>()[i], ti = t.data<float>()[i];
    want += plain_element(GetParam(), xi, ti);
    EXPECT_NEAR(r.dlogits.data<float>()[i], scale * plain_grad(GetParam(), xi, ti), 1e-6) << i;
  }
  EXPECT_NEAR(r.loss_sum, want, 1e-9 * std::max(1.0, want));
}

TEST_P(ElementwiseLosses, GradientMatchesCentralDifferences) {
  const LossPtr loss = make_loss(GetParam());
  const Tensor x = random_f32({4, 5}, 3, -3, 3);
  const Tensor t = random_f32({4, 5}, 4, 0, 1);
  const LossResult r = loss->compute(Context{}, x, t, true, 1.0f);
  const double h = 1e-2;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    Tensor xp = x.clone(), xm = x.clone();
    xp.data<float>()[i] += static_cast<float>(h);
    xm.data<float>()[i] -= static_cast<float>(h);
    const double lp = loss->compute(Context{}, xp, t, false, 1.0f).loss_sum;
    const double lm = loss->compute(Context{}, xm, t, false, 1.0f).loss_sum;
    const double actual_h = (static_cast<double>(xp.data<float>()[i]) - xm.data<float>()[i]) / 2;
    EXPECT_NEAR(r.dlogits.data<float>()[i], (lp - lm) / (2 * actual_h), 2e-3) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Losses, ElementwiseLosses, ::testing::Values("mse", "bce_with_logits"));

TEST(BceWithLogits, StaysFiniteAndExactAtLargeLogits) {
  const LossPtr loss = make_loss("bce_with_logits");
  const Tensor x = Tensor::from_vector(std::vector<float>{80, -80, 80, -80}, {1, 4});
  const Tensor t = Tensor::from_vector(std::vector<float>{1, 0, 0, 1}, {1, 4});
  const LossResult r = loss->compute(Context{}, x, t, true, 1.0f);
  ASSERT_TRUE(std::isfinite(r.loss_sum));
  // Right answers cost log(1 + e^-80) ~ 1.8e-35 each; wrong ones 80 + that.
  EXPECT_NEAR(r.loss_sum, 160.0, 1e-9);
  const float* g = r.dlogits.data<float>();
  EXPECT_NEAR(g[0], 0.0f, 1e-30);
  EXPECT_NEAR(g[1], 0.0f, 1e-30);
  EXPECT_NEAR(g[2], 1.0f, 1e-7);
  EXPECT_NEAR(g[3], -1.0f, 1e-7);
}

TEST(BceWithLogits, RefusesTargetsOutsideTheUnitInterval) {
  const LossPtr loss = make_loss("bce_with_logits");
  const Tensor x = Tensor::zeros({1, 2}, DType::f32);
  const Tensor t = Tensor::from_vector(std::vector<float>{0.5f, 1.5f}, {1, 2});
  EXPECT_THROW(loss->compute(Context{}, x, t, true, 1.0f), std::out_of_range);
}

TEST(CrossEntropyLoss, IsBitForBitTheSoftmaxCrossEntropyOfBefore) {
  const LossPtr loss = make_loss("cross_entropy");
  EXPECT_TRUE(loss->classifies());
  EXPECT_EQ(loss->target_dtype(), DType::i32);
  EXPECT_EQ(loss->target_shape({7, 4}), (Shape{7}));
  const Tensor x = random_f32({7, 4}, 5, -3, 3);
  const Tensor t = Tensor::from_vector(std::vector<std::int32_t>{0, 1, 2, 3, 3, 2, 1}, {7});
  const LossResult a = loss->compute(Context{}, x, t, true, 0.125f);
  const LossResult b = softmax_cross_entropy(x, t, true, 0.125f);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  EXPECT_EQ(a.correct, b.correct);
  EXPECT_EQ(a.count, 7);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(a.dlogits.data<float>()[i], b.dlogits.data<float>()[i]);
  }
}

std::string error_of(const LossPtr& loss, const Tensor& x, const Tensor& t) {
  try {
    (void)loss->compute(Context{}, x, t, true, 1.0f);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(LossTargets, AreRefusedNamingTheLossTheTargetsAndWhatItWants) {
  const Tensor x = Tensor::zeros({4, 3}, DType::f32);
  const Tensor ids = Tensor::zeros({4}, DType::i32);
  EXPECT_EQ(error_of(make_loss("mse"), x, ids),
            "loss mse: targets are i32[4], the model's output [4, 3] takes f32[4, 3]");
  const std::string ce = error_of(make_loss("cross_entropy"), x, Tensor::zeros({4, 3}, DType::f32));
  EXPECT_NE(ce.find("softmax_cross_entropy"), std::string::npos) << ce;
  EXPECT_NE(ce.find("f32[4, 3]"), std::string::npos) << ce;
  EXPECT_EQ(error_of(make_loss("bce_with_logits"), x, Tensor::zeros({4, 2}, DType::f32)),
            "loss bce_with_logits: targets are f32[4, 2], the model's output [4, 3] takes "
            "f32[4, 3]");
  EXPECT_THROW(make_loss("hinge"), std::invalid_argument);
}

TEST(ModelLoss, ComesFromTheSpecAndSetsTheTargets) {
  ModelSpec spec = mlp_spec({3, 8, 2});
  EXPECT_EQ(Model::build(spec).target_shape(5), (Shape{5}));
  EXPECT_EQ(Model::build(spec).target_dtype(), DType::i32);
  spec.loss = "mse";
  const Model m = Model::build(spec);
  EXPECT_EQ(m.loss().name(), "mse");
  EXPECT_EQ(m.target_shape(5), (Shape{5, 2}));
  EXPECT_EQ(m.target_dtype(), DType::f32);
  EXPECT_NE(spec.describe().find("loss=mse"), std::string::npos);
  EXPECT_EQ(mlp_spec({3, 8, 2}).describe().find("loss"), std::string::npos);
  spec.loss = "hinge";
  EXPECT_THROW(Model::build(spec), std::invalid_argument);
}

// The sim device computes nothing but still checks the targets' shape and gives a gradient of
// the output's shape, as for cross-entropy.
TEST(ModelLoss, SimExecutorChecksShapesOnly) {
  const auto sim = make_executor(Device::sim());
  const LossPtr mse = make_loss("mse");
  const Tensor y = Tensor::empty({4, 3}, DType::f32, Device::sim());
  LossResult r;
  sim->run(Context{}, [&](const Context& c) {
    r = sim->loss(c, *mse, y, Tensor::empty({4, 3}, DType::f32, Device::sim()), 0.25f);
  });
  EXPECT_EQ(r.dlogits.shape(), (Shape{4, 3}));
  EXPECT_THROW(sim->run(Context{},
                        [&](const Context& c) {
                          (void)sim->loss(c, *mse, y, Tensor::empty({4}, DType::i32, Device::sim()),
                                          0.25f);
                        }),
               std::invalid_argument);
}

}  // namespace
}  // namespace tandem::models
