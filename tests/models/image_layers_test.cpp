// The image layers ResNet and Inception are built from: batch norm (training and evaluation,
// its running statistics and how optimizers leave them alone), average pooling, global average
// pooling, rectangular convolutions and padded max pooling, against finite differences and
// small hand-computed references.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "grad_check.hpp"
#include "models/layers/avg_pool2d.hpp"
#include "models/layers/batch_norm2d.hpp"
#include "models/layers/conv2d.hpp"
#include "models/layers/global_avg_pool2d.hpp"
#include "models/layers/max_pool2d.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/train_step.hpp"

namespace tandem::models {
namespace {

using testing::check_gradients;
using testing::random_params;
using testing::random_tensor;

void expect_gradients_ok(const Layer& layer, const Tensor& x, const Context& ctx = {}) {
  for (const auto& analytic : {testing::AnalyticFn(testing::fused_analytic),
                               testing::AnalyticFn(testing::split_analytic)}) {
    const auto report = check_gradients(layer, ctx, random_params(layer, 3), x, {}, analytic);
    EXPECT_TRUE(report.ok()) << layer.describe() << "\n" << report.str();
  }
}

Context eval_context() {
  Context ctx;
  ctx.training = false;
  return ctx;
}

TEST(ImageLayerGradients, BatchNormTraining) {
  expect_gradients_ok(BatchNorm2d(3), random_tensor({3, 3, 4, 5}, 21));
}

TEST(ImageLayerGradients, BatchNormEvaluation) {
  expect_gradients_ok(BatchNorm2d(3), random_tensor({3, 3, 4, 5}, 22), eval_context());
}

TEST(ImageLayerGradients, AvgPool) {
  expect_gradients_ok(AvgPool2d(2), random_tensor({2, 3, 6, 6}, 23));
  expect_gradients_ok(AvgPool2d(3, 2, 1), random_tensor({2, 3, 7, 6}, 24));
  expect_gradients_ok(AvgPool2d(3, 1, 1), random_tensor({1, 2, 5, 5}, 25));
}

TEST(ImageLayerGradients, GlobalAvgPool) {
  expect_gradients_ok(GlobalAvgPool2d(), random_tensor({2, 3, 4, 5}, 26));
}

TEST(ImageLayerGradients, RectangularConvolution) {
  expect_gradients_ok(Conv2d(3, 4, 1, 7, 1, 0, 3, cpu::Activation::none),
                      random_tensor({2, 3, 5, 9}, 27));
  expect_gradients_ok(Conv2d(2, 3, 3, 1, 2, 1, 0, cpu::Activation::none),
                      random_tensor({2, 2, 7, 5}, 28));
}

TEST(ImageLayerGradients, PaddedMaxPool) {
  expect_gradients_ok(MaxPool2d(3, 2, 1), random_tensor({2, 3, 7, 6}, 29));
}

// ---- forward values against references computed here ----

std::vector<Tensor> bn_params(const std::vector<float>& gamma, const std::vector<float>& beta,
                              const std::vector<float>& mean, const std::vector<float>& var) {
  const auto c = static_cast<std::int64_t>(gamma.size());
  return {Tensor::from_vector(gamma, {c}), Tensor::from_vector(beta, {c}),
          Tensor::from_vector(mean, {c}), Tensor::from_vector(var, {c}),
          Tensor::from_vector(std::vector<float>{0.0f}, {1})};
}

TEST(BatchNorm2d, TrainingForwardUsesTheBatchStatistics) {
  // [2, 2, 2, 2]: channel 0 holds 1..4 and 5..8 (sample 0, sample 1), channel 1 -3..4 mixed.
  const std::vector<float> xs{1, 2, 3, 4, -3, 0, 2, 1, 5, 6, 7, 8, 4, -1, 3, 2};
  const Tensor x = Tensor::from_vector(xs, {2, 2, 2, 2});
  const BatchNorm2d bn(2);
  const std::vector<Tensor> params = bn_params({1.5f, -0.5f}, {0.1f, 0.2f}, {9, 9}, {9, 9});
  const ForwardResult r = bn.forward(Context{}, params, x);
  const std::vector<float> y = r.y.to_float_vector();
  const float gamma[2] = {1.5f, -0.5f};
  const float beta[2] = {0.1f, 0.2f};
  for (int c = 0; c < 2; ++c) {
    double s = 0;
    for (int n = 0; n < 2; ++n) {
      for (int e = 0; e < 4; ++e) s += xs[static_cast<std::size_t>((n * 2 + c) * 4 + e)];
    }
    const double mean = s / 8;
    double v = 0;
    for (int n = 0; n < 2; ++n) {
      for (int e = 0; e < 4; ++e) {
        const double d = xs[static_cast<std::size_t>((n * 2 + c) * 4 + e)] - mean;
        v += d * d;
      }
    }
    const double var = v / 8;  // biased
    for (int n = 0; n < 2; ++n) {
      for (int e = 0; e < 4; ++e) {
        const auto i = static_cast<std::size_t>((n * 2 + c) * 4 + e);
        const double want = gamma[c] * (xs[i] - mean) / std::sqrt(var + 1e-5) + beta[c];
        EXPECT_NEAR(y[i], want, 1e-5) << "channel " << c << " element " << i;
      }
    }
  }
  // The running statistics played no part, and the slice's sums are kept for them.
  ASSERT_EQ(r.saved.size(), 3U);
  const std::vector<float> sums = r.saved[2].to_float_vector();
  EXPECT_FLOAT_EQ(sums[0], 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8);
  EXPECT_FLOAT_EQ(sums[2], 1 + 4 + 9 + 16 + 25 + 36 + 49 + 64);
  EXPECT_FLOAT_EQ(sums[4], 8.0f);
}

TEST(BatchNorm2d, EvaluationUsesTheRunningStatistics) {
  const std::vector<float> xs{1, 2, 3, 4, -3, 0, 2, 1, 5, 6, 7, 8, 4, -1, 3, 2};
  const Tensor x = Tensor::from_vector(xs, {2, 2, 2, 2});
  const BatchNorm2d bn(2);
  const std::vector<Tensor> params = bn_params({1.5f, -0.5f}, {0.1f, 0.2f}, {2, -1}, {4, 0.25f});
  const std::vector<float> y = bn.forward(eval_context(), params, x).y.to_float_vector();
  const float gamma[2] = {1.5f, -0.5f}, beta[2] = {0.1f, 0.2f}, mean[2] = {2, -1},
              var[2] = {4, 0.25f};
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::size_t c = (i / 4) % 2;
    const double want = gamma[c] * (xs[i] - mean[c]) / std::sqrt(var[c] + 1e-5) + beta[c];
    EXPECT_NEAR(y[i], want, 1e-5) << i;
  }
}

// Per channel of x [n, c, h, w]: sum, sum of squares, count.
struct Stats {
  std::vector<double> sum, sq;
  double count = 0;
};
Stats stats_of(const std::vector<Tensor>& xs, std::int64_t c) {
  Stats s{std::vector<double>(static_cast<std::size_t>(c)),
          std::vector<double>(static_cast<std::size_t>(c)), 0};
  for (const Tensor& x : xs) {
    const std::vector<float> v = x.to_float_vector();
    const std::int64_t hw = x.dim(2) * x.dim(3);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto ch = static_cast<std::size_t>((static_cast<std::int64_t>(i) / hw) % c);
      s.sum[ch] += v[i];
      s.sq[ch] += static_cast<double>(v[i]) * v[i];
    }
    s.count += static_cast<double>(x.dim(0) * hw);
  }
  return s;
}

TEST(BatchNorm2d, RunningStatisticsAfterTwoUpdatesFollowTheFormula) {
  constexpr std::int64_t kC = 3;
  const BatchNorm2d bn(kC);
  std::vector<Tensor> params = bn_params({1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1});
  std::vector<double> mean(kC, 0.0), var(kC, 1.0);
  // Update 1 from one batch; update 2 from two slices whose slots add up (beta 1).
  const std::vector<std::vector<Tensor>> updates = {
      {random_tensor({4, kC, 3, 3}, 31, 2.0f)},
      {random_tensor({2, kC, 3, 3}, 32, 1.5f), random_tensor({3, kC, 3, 3}, 33, 0.5f)}};
  for (const std::vector<Tensor>& slices : updates) {
    std::vector<Tensor> grads;
    for (const Tensor& p : params) grads.push_back(Tensor::full(p.shape(), NAN));
    for (std::size_t s = 0; s < slices.size(); ++s) {
      const ForwardResult f = bn.forward(Context{}, params, slices[s]);
      const Tensor dy = random_tensor(f.y.shape(), 40 + s);
      bn.backward_weight_into(Context{}, f.saved, dy, {grads, 1.0f, s == 0 ? 0.0f : 1.0f});
    }
    bn.update_buffers(cpu_kernels(), params, grads, params);
    const Stats st = stats_of(slices, kC);
    for (std::size_t c = 0; c < kC; ++c) {
      const double mb = st.sum[c] / st.count;
      const double vb = (st.sq[c] / st.count - mb * mb) * st.count / (st.count - 1);
      mean[c] = 0.9 * mean[c] + 0.1 * mb;
      var[c] = 0.9 * var[c] + 0.1 * vb;
    }
  }
  const std::vector<float> rm = params[2].to_float_vector();
  const std::vector<float> rv = params[3].to_float_vector();
  for (std::size_t c = 0; c < kC; ++c) {
    EXPECT_NEAR(rm[c], mean[c], 1e-5) << "running_mean " << c;
    EXPECT_NEAR(rv[c], var[c], 1e-4) << "running_var " << c;
  }
  EXPECT_EQ(params[4].to_float_vector()[0], 2.0f);  // updates taken
}

TEST(AvgPool2d, AveragesTheWholeWindowPaddingIncluded) {
  std::vector<float> xs(9);
  for (int i = 0; i < 9; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  const Tensor x = Tensor::from_vector(xs, {1, 1, 3, 3});
  EXPECT_EQ(AvgPool2d(2, 1).forward(Context{}, {}, x).y.to_float_vector(),
            (std::vector<float>{3, 4, 6, 7}));
  // count_include_pad: the corner window holds 1, 2, 4, 5 and five zeros of padding.
  const std::vector<float> y = AvgPool2d(3, 2, 1).forward(Context{}, {}, x).y.to_float_vector();
  const std::vector<float> want{12.0f / 9, 16.0f / 9, 24.0f / 9, 28.0f / 9};
  ASSERT_EQ(y.size(), want.size());
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
}

TEST(GlobalAvgPool2d, MeansEachPlane) {
  const Tensor x =
      Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 10, 20, 30, 40}, {1, 2, 2, 2});
  const ForwardResult r = GlobalAvgPool2d().forward(Context{}, {}, x);
  EXPECT_EQ(r.y.shape(), (Shape{1, 2}));
  EXPECT_EQ(r.y.to_float_vector(), (std::vector<float>{2.5f, 25.0f}));
}

TEST(Conv2d, RectangularWindowMatchesADirectConvolution) {
  // Inception's 1x7 (pad 0, 3) and 7x1 (pad 3, 0), and a strided 3x1.
  struct Case {
    std::int64_t kh, kw, stride, ph, pw;
  };
  for (const Case c : {Case{1, 7, 1, 0, 3}, Case{7, 1, 1, 3, 0}, Case{3, 1, 2, 1, 0}}) {
    const Conv2d conv(2, 3, c.kh, c.kw, c.stride, c.ph, c.pw, cpu::Activation::none);
    const Tensor x = random_tensor({2, 2, 8, 9}, 50);
    const std::vector<Tensor> params = random_params(conv, 51);
    const Tensor y = conv.forward(Context{}, params, x).y;
    const std::int64_t oh = (8 + 2 * c.ph - c.kh) / c.stride + 1;
    const std::int64_t ow = (9 + 2 * c.pw - c.kw) / c.stride + 1;
    ASSERT_EQ(y.shape(), (Shape{2, 3, oh, ow})) << conv.describe();
    const float* xv = x.data<float>();
    const float* w = params[0].data<float>();
    const float* b = params[1].data<float>();
    const float* yv = y.data<float>();
    double worst = 0;
    for (std::int64_t n = 0; n < 2; ++n) {
      for (std::int64_t o = 0; o < 3; ++o) {
        for (std::int64_t i = 0; i < oh; ++i) {
          for (std::int64_t j = 0; j < ow; ++j) {
            double s = b[o];
            for (std::int64_t ci = 0; ci < 2; ++ci) {
              for (std::int64_t ki = 0; ki < c.kh; ++ki) {
                for (std::int64_t kj = 0; kj < c.kw; ++kj) {
                  const std::int64_t h = i * c.stride - c.ph + ki;
                  const std::int64_t ww = j * c.stride - c.pw + kj;
                  if (h < 0 || h >= 8 || ww < 0 || ww >= 9) continue;
                  s += static_cast<double>(w[((o * 2 + ci) * c.kh + ki) * c.kw + kj]) *
                       xv[((n * 2 + ci) * 8 + h) * 9 + ww];
                }
              }
            }
            worst = std::max(worst, std::abs(s - yv[((n * 3 + o) * oh + i) * ow + j]));
          }
        }
      }
    }
    EXPECT_LE(worst, 1e-5) << conv.describe();
  }
}

TEST(Conv2d, SquareDescriptionIsUnchanged) {
  EXPECT_EQ(Conv2d(3, 4, 3, 1, 1).describe(), "conv2d(3->4, k=3, stride=1, pad=1)");
  EXPECT_EQ(Conv2d(3, 4, 1, 7, 1, 0, 3, cpu::Activation::relu).describe(),
            "conv2d(3->4, k=1x7, stride=1, pad=0x3, relu)");
  EXPECT_THROW(MaxPool2d(3, 2, 2), std::invalid_argument);
  EXPECT_THROW(AvgPool2d(2, 1, 2), std::invalid_argument);
}

// ---- buffers and optimizers ----

ModelSpec bn_graph_spec() {
  ModelSpec s;
  s.name = "graph";
  s.graph.input_shape = {2 * 4 * 4};
  auto node = [](std::string name, std::string layer) {
    GraphNode n;
    n.name = std::move(name);
    n.layer = std::move(layer);
    return n;
  };
  GraphNode reshape = node("img", "reshape");
  reshape.shape = {2, 4, 4};
  GraphNode conv = node("conv", "conv2d");
  conv.out = 3;
  conv.kernel = 3;
  conv.pad = 1;
  GraphNode head = node("head", "linear");
  head.out = 4;
  s.graph.nodes = {reshape,
                   conv,
                   node("bn", "batch_norm"),
                   node("relu", "relu"),
                   node("pool", "global_avg_pool"),
                   head};
  return s;
}

TEST(Buffers, TheModelNamesThemAndOptimizersLeaveThemToTheirLayer) {
  const Model model = Model::build(bn_graph_spec());
  ASSERT_TRUE(model.has_buffers());
  EXPECT_TRUE(model.is_buffer("2.running_mean"));
  EXPECT_TRUE(model.is_buffer("2.running_var"));
  EXPECT_TRUE(model.is_buffer("2.count"));
  EXPECT_FALSE(model.is_buffer("2.weight"));
  EXPECT_FALSE(model.is_buffer("1.weight"));
  const Tensor x = random_tensor({5, 32}, 60);
  const Tensor t = Tensor::from_vector(std::vector<std::int32_t>{0, 1, 2, 3, 1}, {5});
  for (const char* kind : {"sgd", "adamw"}) {
    OptimizerSpec os;
    os.kind = kind;
    os.lr = 0.1;
    os.momentum = std::string(kind) == "sgd" ? 0.9 : 0.0;
    os.weight_decay = 0.5;
    const ParamSet init = model.init_params(7);
    const StepOutput g = train_step(model, init, x, t, 1);
    // The optimizer, attached: trainables move, buffers follow their layer's update alone.
    ParamSet stepped = init.clone();
    auto opt = make_optimizer(os);
    opt->attach(model);
    opt->step(stepped, g.grads);
    ParamSet buffers_only = init.clone();
    model.update_buffers(cpu_kernels(), buffers_only, g.grads);
    for (std::int64_t i = 0; i < init.size(); ++i) {
      const std::string& name = init.name(i);
      if (model.is_buffer(name)) {
        EXPECT_EQ(stepped[i].to_float_vector(), buffers_only[i].to_float_vector())
            << kind << " " << name;
      } else {
        EXPECT_NE(stepped[i].to_float_vector(), init[i].to_float_vector()) << kind << " " << name;
      }
    }
    EXPECT_EQ(stepped.at("2.count").to_float_vector()[0], 1.0f);
    EXPECT_NE(stepped.at("2.running_mean").to_float_vector(),
              init.at("2.running_mean").to_float_vector());
    // No optimizer state for buffers, and a state without them is accepted.
    const ParamSet state = opt->state();
    for (const std::string& entry : state.names()) {
      EXPECT_EQ(entry.find("running"), std::string::npos) << kind << " " << entry;
      EXPECT_EQ(entry.find("count"), std::string::npos) << kind << " " << entry;
    }
    EXPECT_NO_THROW(opt->check_state(state, stepped)) << kind;

    // train_step with the optimizer attaches it itself and takes no fused update (plain SGD
    // would fuse otherwise): the same result as the two steps above.
    if (std::string(kind) == "sgd") {
      OptimizerSpec plain = os;
      plain.momentum = 0;
      plain.weight_decay = 0;
      ParamSet a = init.clone();
      auto fused_capable = make_optimizer(plain);
      ASSERT_TRUE(fused_capable->fused_update().has_value());
      (void)train_step(model, a, *fused_capable, x, t, 1);
      ParamSet b = init.clone();
      auto reference = make_optimizer(plain);
      reference->attach(model);
      reference->step(b, g.grads);
      for (std::int64_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].to_float_vector(), b[i].to_float_vector()) << a.name(i);
      }
    }
  }
}

TEST(Buffers, EvaluationReadsTheRunningStatistics) {
  const Model model = Model::build(bn_graph_spec());
  ParamSet params = model.init_params(3);
  const Tensor x = random_tensor({4, 32}, 61);
  Context eval;
  eval.training = false;
  eval.keep_saved = false;
  const Tensor before = model.forward(eval, params, x, 0, model.num_layers()).y;
  float* rm = params.at("2.running_mean").data<float>();
  rm[0] += 1.0f;
  const Tensor after = model.forward(eval, params, x, 0, model.num_layers()).y;
  EXPECT_NE(before.to_float_vector(), after.to_float_vector());
}

}  // namespace
}  // namespace tandem::models
