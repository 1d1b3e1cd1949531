// Finite-difference checks of every layer's input and weight gradients, and proof that the
// check catches a wrong gradient.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "grad_check.hpp"
#include "models/layers/activation.hpp"
#include "models/layers/attention.hpp"
#include "models/layers/conv2d.hpp"
#include "models/layers/dropout.hpp"
#include "models/layers/embedding.hpp"
#include "models/layers/flatten.hpp"
#include "models/layers/layer_norm.hpp"
#include "models/layers/linear.hpp"
#include "models/layers/max_pool2d.hpp"
#include "models/layers/reshape.hpp"
#include "models/layers/transformer_block.hpp"

namespace tandem::models {
namespace {

using testing::check_gradients;
using testing::GradCheckOptions;
using testing::random_params;
using testing::random_tensor;

void expect_gradients_ok(const Layer& layer, const Tensor& x, std::uint64_t seed = 3,
                         const Context& ctx = {}, const GradCheckOptions& options = {}) {
  const auto report = check_gradients(layer, ctx, random_params(layer, seed), x, options);
  EXPECT_TRUE(report.ok()) << layer.describe() << "\n" << report.str();
  if (std::getenv("TANDEM_GRAD_VERBOSE") != nullptr)
    std::printf("%s\n%s", layer.describe().c_str(), report.str().c_str());
  // Every parameter and the input (when differentiable) were probed.
  EXPECT_GE(report.tensors.size(), layer.param_specs().size());
  // The split B + W path must give the same answer.
  const auto split =
      check_gradients(layer, ctx, random_params(layer, seed), x, options, testing::split_analytic);
  EXPECT_TRUE(split.ok()) << layer.describe() << " (backward_input + backward_weight)\n"
                          << split.str();
}

TEST(LayerGradients, Linear) {
  expect_gradients_ok(Linear(5, 4), random_tensor({3, 5}, 11));
}

TEST(LayerGradients, LinearOn3dInputWithoutBias) {
  expect_gradients_ok(Linear(4, 3, cpu::Activation::none, false), random_tensor({2, 3, 4}, 12));
}

TEST(LayerGradients, LinearFusedRelu) {
  expect_gradients_ok(Linear(6, 5, cpu::Activation::relu), random_tensor({4, 6}, 13));
}

TEST(LayerGradients, LinearFusedGelu) {
  expect_gradients_ok(Linear(6, 5, cpu::Activation::gelu), random_tensor({4, 6}, 14));
}

TEST(LayerGradients, ReLU) {
  expect_gradients_ok(ReLU(), random_tensor({3, 7}, 15));
}

TEST(LayerGradients, GELU) {
  expect_gradients_ok(GELU(), random_tensor({3, 7}, 16, 2.0f));
}

TEST(LayerGradients, LayerNorm) {
  expect_gradients_ok(LayerNorm(6), random_tensor({2, 3, 6}, 17));
}

TEST(LayerGradients, EmbeddingWithPositions) {
  const Embedding layer(7, 4, 5);
  // Repeated ids: the scatter-add must sum their contributions.
  const Tensor ids = Tensor::from_vector(std::vector<std::int32_t>{1, 3, 3, 0, 6, 1, 1, 2}, {2, 4});
  const auto report = check_gradients(layer, {}, random_params(layer, 5), ids);
  EXPECT_TRUE(report.ok()) << report.str();
  ASSERT_EQ(report.tensors.size(), 2u);  // no input gradient for ids
}

TEST(LayerGradients, CausalSelfAttention) {
  expect_gradients_ok(CausalSelfAttention(8, 2), random_tensor({2, 5, 8}, 18));
}

TEST(LayerGradients, TransformerBlock) {
  expect_gradients_ok(TransformerBlock(8, 2, 16, 0.0f, 1, 2), random_tensor({2, 4, 8}, 19));
}

TEST(LayerGradients, TransformerBlockWithDropout) {
  // Same step seed in every forward: the masks are fixed, so the function is smooth.
  const Context ctx{true, 42, 3};
  expect_gradients_ok(TransformerBlock(8, 2, 16, 0.25f, 1, 2), random_tensor({2, 4, 8}, 20), 3,
                      ctx);
}

TEST(LayerGradients, Dropout) {
  const Context ctx{true, 9, 0};
  expect_gradients_ok(Dropout(0.3f, 4), random_tensor({4, 6}, 21), 3, ctx);
}

TEST(LayerGradients, Conv2dPadded) {
  expect_gradients_ok(Conv2d(2, 3, 3, 1, 1), random_tensor({2, 2, 5, 4}, 22));
}

TEST(LayerGradients, Conv2dStridedRelu) {
  expect_gradients_ok(Conv2d(3, 2, 2, 2, 0, cpu::Activation::relu),
                      random_tensor({2, 3, 6, 6}, 23));
}

TEST(LayerGradients, MaxPool2d) {
  expect_gradients_ok(MaxPool2d(2), random_tensor({2, 3, 4, 6}, 24));
}

TEST(LayerGradients, MaxPool2dOverlapping) {
  expect_gradients_ok(MaxPool2d(3, 2), random_tensor({1, 2, 7, 7}, 25));
}

TEST(LayerGradients, Flatten) {
  expect_gradients_ok(Flatten(), random_tensor({2, 3, 2, 2}, 26));
}

TEST(LayerGradients, Reshape) {
  expect_gradients_ok(Reshape({3, 4}), random_tensor({2, 12}, 27));
}

// The check is only worth something if it fails on wrong gradients.
class PerturbedGradient : public ::testing::Test {
 protected:
  static testing::GradCheckReport check_with(testing::AnalyticFn fn) {
    const Linear layer(5, 4, cpu::Activation::gelu);
    return check_gradients(layer, {}, random_params(layer, 3), random_tensor({3, 5}, 11), {}, fn);
  }
};

TEST_F(PerturbedGradient, CorrectGradientPasses) {
  EXPECT_TRUE(check_with(testing::fused_analytic).ok());
}

TEST_F(PerturbedGradient, OneWrongWeightCoordinateFails) {
  const auto report = check_with(
      [](const Layer& l, const Context& c, ParamView p, const Tensor& x, const Tensor& r) {
        testing::Analytic a = testing::fused_analytic(l, c, p, x, r);
        float* w = a.grads[0].data<float>();
        float largest = 0;
        for (std::int64_t i = 0; i < a.grads[0].numel(); ++i)
          largest = std::max(largest, std::abs(w[i]));
        w[7] += 0.01f * largest;  // 1% of the gradient's scale, in one coordinate
        return a;
      });
  EXPECT_FALSE(report.ok()) << report.str();
  EXPECT_GT(report.tensors.at(1).max_error, 1.0);  // the weight's check failed
  EXPECT_LE(report.tensors.at(0).max_error, 1.0);  // the input's did not
}

TEST_F(PerturbedGradient, SlightlyScaledInputGradientFails) {
  const auto report = check_with(
      [](const Layer& l, const Context& c, ParamView p, const Tensor& x, const Tensor& r) {
        testing::Analytic a = testing::fused_analytic(l, c, p, x, r);
        float* d = a.dx.data<float>();
        for (std::int64_t i = 0; i < a.dx.numel(); ++i) d[i] *= 1.02f;
        return a;
      });
  EXPECT_FALSE(report.ok()) << report.str();
  EXPECT_GT(report.tensors.at(0).max_error, 1.0);
}

TEST_F(PerturbedGradient, MissingBiasGradientFails) {
  const auto report = check_with(
      [](const Layer& l, const Context& c, ParamView p, const Tensor& x, const Tensor& r) {
        testing::Analytic a = testing::fused_analytic(l, c, p, x, r);
        a.grads[1].set_zero();
        return a;
      });
  EXPECT_FALSE(report.ok()) << report.str();
}

}  // namespace
}  // namespace tandem::models
