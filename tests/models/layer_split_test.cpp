// backward_input + backward_weight must equal the fused backward (the zero-bubble B/W split is
// only valid if it computes the same thing), and the gradient sink's alpha/beta must hold.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

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
#include "models/layers/transformer_block.hpp"

namespace tandem::models {
namespace {

using testing::random_params;
using testing::random_tensor;

struct Case {
  std::string name;
  std::shared_ptr<Layer> layer;
  Tensor x;
};

std::vector<Case> cases() {
  const Tensor ids = Tensor::from_vector(std::vector<std::int32_t>{1, 3, 3, 0, 6, 1}, {2, 3});
  return {
      {"linear", std::make_shared<Linear>(6, 5), random_tensor({4, 6}, 1)},
      {"linear_relu", std::make_shared<Linear>(6, 5, cpu::Activation::relu),
       random_tensor({4, 6}, 2)},
      {"linear_gelu", std::make_shared<Linear>(6, 5, cpu::Activation::gelu),
       random_tensor({2, 2, 6}, 3)},
      {"relu", std::make_shared<ReLU>(), random_tensor({3, 4}, 4)},
      {"gelu", std::make_shared<GELU>(), random_tensor({3, 4}, 5)},
      {"layer_norm", std::make_shared<LayerNorm>(6), random_tensor({3, 6}, 6)},
      {"embedding", std::make_shared<Embedding>(7, 4, 3), ids},
      {"attention", std::make_shared<CausalSelfAttention>(8, 2), random_tensor({2, 5, 8}, 7)},
      {"block", std::make_shared<TransformerBlock>(8, 2, 16, 0.2f, 1, 2),
       random_tensor({2, 4, 8}, 8)},
      {"dropout", std::make_shared<Dropout>(0.5f, 3), random_tensor({4, 5}, 9)},
      {"conv", std::make_shared<Conv2d>(2, 3, 3, 1, 1, cpu::Activation::relu),
       random_tensor({2, 2, 5, 5}, 10)},
      {"max_pool", std::make_shared<MaxPool2d>(2), random_tensor({2, 2, 4, 4}, 11)},
      {"flatten", std::make_shared<Flatten>(), random_tensor({2, 2, 3}, 12)},
  };
}

TEST(LayerSplit, InputThenWeightEqualsFusedExactly) {
  const Context ctx{true, 5, 2};
  for (const Case& c : cases()) {
    const auto params = random_params(*c.layer, 13);
    const Tensor dy = random_tensor(c.layer->output_shape(c.x.shape()), 14);
    ForwardResult f1 = c.layer->forward(ctx, params, c.x);
    ForwardResult f2 = c.layer->forward(ctx, params, c.x);
    const Tensor dx = c.layer->backward_input(ctx, params, f1.saved, dy);
    const std::vector<Tensor> gw = c.layer->backward_weight(ctx, f1.saved, dy);
    const BackwardResult fused = c.layer->backward(ctx, params, f2.saved, dy, true);
    ASSERT_EQ(dx.defined(), fused.dx.defined()) << c.name;
    if (dx.defined()) {
      EXPECT_EQ(dx.to_float_vector(), fused.dx.to_float_vector()) << c.name;
    }
    ASSERT_EQ(gw.size(), fused.grads.size()) << c.name;
    for (std::size_t i = 0; i < gw.size(); ++i) {
      EXPECT_EQ(gw[i].to_float_vector(), fused.grads[i].to_float_vector())
          << c.name << " grad " << i;
    }
    // Without dx the weight gradients do not change.
    ForwardResult f3 = c.layer->forward(ctx, params, c.x);
    const BackwardResult no_dx = c.layer->backward(ctx, params, f3.saved, dy, false);
    EXPECT_FALSE(no_dx.dx.defined()) << c.name;
    for (std::size_t i = 0; i < gw.size(); ++i) {
      EXPECT_EQ(gw[i].to_float_vector(), no_dx.grads[i].to_float_vector())
          << c.name << " grad " << i;
    }
  }
}

TEST(LayerSplit, SinkScalesAndAccumulates) {
  const Context ctx{true, 5, 0};
  for (const Case& c : cases()) {
    if (c.layer->param_specs().empty()) continue;
    const auto params = random_params(*c.layer, 15);
    const Tensor dy = random_tensor(c.layer->output_shape(c.x.shape()), 16);
    ForwardResult f = c.layer->forward(ctx, params, c.x);
    const BackwardResult ref = c.layer->backward(ctx, params, f.saved, dy, true);
    std::vector<Tensor> acc;
    for (const Tensor& g : ref.grads) acc.push_back(Tensor::full(g.shape(), 3.0f));
    ForwardResult f2 = c.layer->forward(ctx, params, c.x);
    c.layer->backward_into(ctx, params, f2.saved, dy, true, GradSink{acc, 0.5f, 2.0f});
    for (std::size_t i = 0; i < acc.size(); ++i) {
      const std::vector<float> got = acc[i].to_float_vector();
      const std::vector<float> g = ref.grads[i].to_float_vector();
      for (std::size_t k = 0; k < g.size(); ++k) {
        ASSERT_NEAR(got[k], 0.5f * g[k] + 6.0f, 1e-5f * (1 + std::abs(g[k])))
            << c.name << " grad " << i;
      }
    }
  }
}

TEST(LayerSplit, BackwardWithoutForwardStateIsAnError) {
  const Linear layer(3, 2);
  const auto params = random_params(layer, 1);
  Saved empty;
  EXPECT_THROW(layer.backward_input({}, params, empty, Tensor::zeros({1, 2})),
               std::invalid_argument);
  // Eval-mode forwards keep nothing.
  Context eval{false, 0, 0};
  eval.keep_saved = false;
  ForwardResult f = layer.forward(eval, params, Tensor::zeros({1, 3}));
  EXPECT_TRUE(f.saved.empty());
  const TransformerBlock block(8, 2, 16, 0.0f, 1, 1);
  const auto bp = random_params(block, 2);
  ForwardResult fb = block.forward({}, bp, random_tensor({1, 2, 8}, 3));
  // W before B: the block's weight gradient needs B's intermediate gradients.
  EXPECT_THROW(block.backward_weight({}, fb.saved, random_tensor({1, 2, 8}, 4)),
               std::invalid_argument);
}

}  // namespace
}  // namespace tandem::models
