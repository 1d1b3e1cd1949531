// Forward results of kernels and layers against direct double-precision references (gradient
// checks only prove forward and backward agree with each other).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "grad_check.hpp"
#include "models/kernels/cpu/gemm.hpp"
#include "models/kernels/cpu/math.hpp"
#include "models/kernels/cpu/reduce.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/layers/activation.hpp"
#include "models/layers/attention.hpp"
#include "models/layers/conv2d.hpp"
#include "models/layers/embedding.hpp"
#include "models/layers/layer_norm.hpp"
#include "models/layers/linear.hpp"
#include "models/layers/max_pool2d.hpp"
#include "models/layers/transformer_block.hpp"
#include "models/loss.hpp"

namespace tandem::models {
namespace {

using testing::random_params;
using testing::random_tensor;

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i]));
    if (e > worst) {
      worst = e;
      at = i;
    }
  }
  EXPECT_LE(worst, tol) << "element " << at << ": got " << got[at] << ", want " << want[at];
}

struct GemmCase {
  bool ta, tb;
  std::int64_t m, n, k;
};

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTest, MatchesNaiveWithPaddingAndBeta) {
  const GemmCase c = GetParam();
  // Leading dimensions larger than the rows: sub-matrices of bigger buffers.
  const std::int64_t lda = (c.ta ? c.m : c.k) + 3;
  const std::int64_t ldb = (c.tb ? c.k : c.n) + 5;
  const std::int64_t ldc = c.n + 2;
  const Tensor a = random_tensor({(c.ta ? c.k : c.m), lda}, 1);
  const Tensor b = random_tensor({(c.tb ? c.n : c.k), ldb}, 2);
  Tensor cm = random_tensor({c.m, ldc}, 3);
  const std::vector<float> c0 = cm.to_float_vector();
  const float alpha = 0.75f;
  const float beta = -0.5f;
  cpu::gemm(c.ta, c.tb, c.m, c.n, c.k, alpha, a.data<float>(), lda, b.data<float>(), ldb, beta,
            cm.data<float>(), ldc);
  std::vector<double> want(c0.begin(), c0.end());
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (std::int64_t l = 0; l < c.k; ++l) {
        const double x = c.ta ? pa[l * lda + i] : pa[i * lda + l];
        const double y = c.tb ? pb[j * ldb + l] : pb[l * ldb + j];
        s += x * y;
      }
      want[static_cast<std::size_t>(i * ldc + j)] =
          alpha * s + beta * c0[static_cast<std::size_t>(i * ldc + j)];
    }
  }
  expect_close(cm.to_float_vector(), want, 1e-5);
}

// Small (one BLAS call) and large (split into per-worker tiles, on M or on N) products.
INSTANTIATE_TEST_SUITE_P(
    AllTransposes, GemmTest,
    ::testing::Values(GemmCase{false, false, 7, 5, 3}, GemmCase{false, true, 6, 9, 4},
                      GemmCase{true, false, 5, 4, 8}, GemmCase{true, true, 3, 6, 5},
                      GemmCase{false, false, 130, 70, 257}, GemmCase{false, true, 66, 190, 300},
                      GemmCase{true, false, 200, 97, 160}, GemmCase{true, true, 90, 210, 150}));

TEST(Kernels, GemmPoliciesAgree) {
  const std::int64_t m = 96, n = 160, k = 320;
  const Tensor a = random_tensor({m, k}, 4);
  const Tensor b = random_tensor({k, n}, 5);
  Tensor c1 = Tensor::empty({m, n});
  Tensor c2 = Tensor::empty({m, n});
  const cpu::GemmThreading before = cpu::gemm_threading();
  cpu::set_gemm_threading(cpu::GemmThreading::blas_threads);
  cpu::gemm(false, false, m, n, k, 1, a.data<float>(), k, b.data<float>(), n, 0, c1.data<float>(),
            n);
  cpu::set_gemm_threading(cpu::GemmThreading::tbb_tiles);
  cpu::gemm(false, false, m, n, k, 1, a.data<float>(), k, b.data<float>(), n, 0, c2.data<float>(),
            n);
  cpu::set_gemm_threading(before);
  const std::vector<float> v1 = c1.to_float_vector();
  expect_close(c2.to_float_vector(), std::vector<double>(v1.begin(), v1.end()), 1e-5);
}

TEST(Kernels, FastExpIsAccurate) {
  double worst = 0;
  for (float x = -86.5f; x <= 88.0f; x += 0.0137f) {
    worst = std::max(worst, std::abs(cpu::fast_exp(x) - std::exp(static_cast<double>(x))) /
                                std::exp(static_cast<double>(x)));
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(cpu::fast_exp(-200.0f), cpu::fast_exp(-86.5f));  // clamps instead of underflowing
  EXPECT_GT(cpu::fast_exp(-86.5f), 0.0f);
}

TEST(Kernels, GeluMatchesTanhFormula) {
  for (float x = -6.0f; x <= 6.0f; x += 0.01f) {
    const double xd = x;
    const double want =
        0.5 * xd * (1 + std::tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd)));
    EXPECT_NEAR(cpu::gelu(x), want, 1e-6 * (1 + std::abs(want))) << x;
  }
}

TEST(Kernels, ColumnSumIsExactForIntegersAndHonoursAlphaBeta) {
  const std::int64_t rows = 1000, cols = 37;  // several fixed chunks
  Tensor x = Tensor::empty({rows, cols});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 7);
  Tensor out = Tensor::full({cols}, 10.0f);
  cpu::column_sum(x.data<float>(), rows, cols, 2.0f, 0.5f, out.data<float>());
  for (std::int64_t c = 0; c < cols; ++c) {
    double s = 0;
    for (std::int64_t r = 0; r < rows; ++r) s += static_cast<double>((r * cols + c) % 7);
    EXPECT_EQ(out.data<float>()[c], static_cast<float>(2 * s + 5)) << c;
  }
}

TEST(LayerForward, LinearRelu) {
  const Linear layer(5, 3, cpu::Activation::relu);
  const auto p = random_params(layer, 1);
  const Tensor x = random_tensor({4, 5}, 2);
  const Tensor y = layer.forward({}, p, x).y;
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) {
    for (int o = 0; o < 3; ++o) {
      double s = p[1].data<float>()[o];
      for (int j = 0; j < 5; ++j)
        s += static_cast<double>(x.data<float>()[i * 5 + j]) * p[0].data<float>()[o * 5 + j];
      want.push_back(std::max(s, 0.0));
    }
  }
  expect_close(y.to_float_vector(), want, 1e-6);
}

TEST(LayerForward, LayerNorm) {
  const LayerNorm layer(8);
  const auto p = random_params(layer, 3);
  const Tensor x = random_tensor({3, 8}, 4, 3.0f);
  const std::vector<float> y = layer.forward({}, p, x).y.to_float_vector();
  std::vector<double> want;
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 8; ++c) mean += x.data<float>()[r * 8 + c] / 8.0;
    for (int c = 0; c < 8; ++c) var += std::pow(x.data<float>()[r * 8 + c] - mean, 2) / 8.0;
    for (int c = 0; c < 8; ++c) {
      want.push_back((x.data<float>()[r * 8 + c] - mean) / std::sqrt(var + 1e-5) *
                         p[0].data<float>()[c] +
                     p[1].data<float>()[c]);
    }
  }
  expect_close(y, want, 1e-5);
}

TEST(LayerForward, EmbeddingAddsPositions) {
  const Embedding layer(5, 3, 4);
  const auto p = random_params(layer, 5);
  const Tensor ids = Tensor::from_vector(std::vector<std::int32_t>{4, 0, 2, 2, 1, 3}, {2, 3});
  const std::vector<float> y = layer.forward({}, p, ids).y.to_float_vector();
  std::vector<double> want;
  for (int i = 0; i < 6; ++i) {
    for (int c = 0; c < 3; ++c) {
      want.push_back(p[0].data<float>()[ids.data<std::int32_t>()[i] * 3 + c] +
                     p[1].data<float>()[(i % 3) * 3 + c]);
    }
  }
  expect_close(y, want, 1e-7);
  const Tensor bad = Tensor::from_vector(std::vector<std::int32_t>{5}, {1, 1});
  EXPECT_THROW(layer.forward({}, p, bad), std::out_of_range);
}

// Direct causal attention in double.
std::vector<double> naive_attention(const Tensor& x, const std::vector<Tensor>& p, int b, int t,
                                    int d, int heads) {
  const int dh = d / heads;
  auto lin = [](const std::vector<double>& in, int rows, int cin, const Tensor& w,
                const Tensor& bias, int cout) {
    std::vector<double> out(static_cast<std::size_t>(rows * cout));
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < cout; ++o) {
        double s = bias.data<float>()[o];
        for (int j = 0; j < cin; ++j) s += in[r * cin + j] * w.data<float>()[o * cin + j];
        out[r * cout + o] = s;
      }
    return out;
  };
  const std::vector<float> xf = x.to_float_vector();
  const std::vector<double> xd(xf.begin(), xf.end());
  const std::vector<double> qkv = lin(xd, b * t, d, p[0], p[1], 3 * d);
  std::vector<double> att(static_cast<std::size_t>(b * t * d));
  for (int s = 0; s < b; ++s)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < t; ++i) {
        std::vector<double> w(static_cast<std::size_t>(i + 1));
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int c = 0; c < dh; ++c)
            dot +=
                qkv[(s * t + i) * 3 * d + h * dh + c] * qkv[(s * t + j) * 3 * d + d + h * dh + c];
          w[j] = dot / std::sqrt(static_cast<double>(dh));
          mx = std::max(mx, w[j]);
        }
        double sum = 0;
        for (double& v : w) sum += (v = std::exp(v - mx));
        for (int c = 0; c < dh; ++c) {
          double o = 0;
          for (int j = 0; j <= i; ++j)
            o += w[j] / sum * qkv[(s * t + j) * 3 * d + 2 * d + h * dh + c];
          att[(s * t + i) * d + h * dh + c] = o;
        }
      }
  return lin(att, b * t, d, p[2], p[3], d);
}

TEST(LayerForward, CausalSelfAttention) {
  const CausalSelfAttention layer(12, 3);
  const auto p = random_params(layer, 6);
  const Tensor x = random_tensor({2, 7, 12}, 7);
  expect_close(layer.forward({}, p, x).y.to_float_vector(), naive_attention(x, p, 2, 7, 12, 3),
               2e-5);
}

TEST(LayerForward, TransformerBlockIsItsParts) {
  const int d = 8;
  const TransformerBlock block(d, 2, 32, 0.0f, 1, 1);
  const auto p = random_params(block, 8);
  const Tensor x = random_tensor({2, 5, d}, 9);
  const Context ctx{false, 0, 0};
  // Compose the same computation from standalone layers.
  const LayerNorm ln(d);
  const CausalSelfAttention attn(d, 2);
  const Linear fc(d, 32, cpu::Activation::gelu);
  const Linear proj(32, d);
  const Tensor h1 = ln.forward(ctx, std::vector<Tensor>{p[0], p[1]}, x).y;
  const Tensor a = attn.forward(ctx, std::vector<Tensor>{p[2], p[3], p[4], p[5]}, h1).y;
  std::vector<float> x1 = x.to_float_vector();
  for (std::size_t i = 0; i < x1.size(); ++i) x1[i] += a.to_float_vector()[i];
  const Tensor x1t = Tensor::from_vector(x1, x.shape());
  const Tensor h2 = ln.forward(ctx, std::vector<Tensor>{p[6], p[7]}, x1t).y;
  const Tensor m = proj.forward(ctx, std::vector<Tensor>{p[10], p[11]},
                                fc.forward(ctx, std::vector<Tensor>{p[8], p[9]}, h2).y)
                       .y;
  std::vector<double> want;
  for (std::size_t i = 0; i < x1.size(); ++i) want.push_back(x1[i] + m.to_float_vector()[i]);
  expect_close(block.forward(ctx, p, x).y.to_float_vector(), want, 1e-6);
}

TEST(LayerForward, Conv2dMatchesDirectConvolution) {
  const int cin = 3, cout = 4, k = 3, stride = 2, pad = 1, h = 7, w = 6;
  const Conv2d layer(cin, cout, k, stride, pad);
  const auto p = random_params(layer, 10);
  const Tensor x = random_tensor({2, cin, h, w}, 11);
  const Tensor y = layer.forward({}, p, x).y;
  const int oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
  ASSERT_EQ(y.shape(), (Shape{2, cout, oh, ow}));
  std::vector<double> want;
  for (int s = 0; s < 2; ++s)
    for (int o = 0; o < cout; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double acc = p[1].data<float>()[o];
          for (int c = 0; c < cin; ++c)
            for (int ki = 0; ki < k; ++ki)
              for (int kj = 0; kj < k; ++kj) {
                const int hh = i * stride - pad + ki, ww = j * stride - pad + kj;
                if (hh < 0 || hh >= h || ww < 0 || ww >= w) continue;
                acc += static_cast<double>(x.data<float>()[((s * cin + c) * h + hh) * w + ww]) *
                       p[0].data<float>()[((o * cin + c) * k + ki) * k + kj];
              }
          want.push_back(acc);
        }
  expect_close(y.to_float_vector(), want, 1e-6);
}

TEST(LayerForward, MaxPool2d) {
  const MaxPool2d layer(2);
  const Tensor x = Tensor::from_vector(
      std::vector<float>{1, 5, 2, 0, 3, 4, 8, 7, -1, -2, -3, -4, -5, -6, -7, -8}, {1, 1, 4, 4});
  EXPECT_EQ(layer.forward({}, {}, x).y.to_float_vector(), (std::vector<float>{5, 8, -1, -3}));
}

TEST(LayerForward, SoftmaxCrossEntropy) {
  const Tensor z = random_tensor({3, 2, 5}, 12, 2.0f);
  const Tensor t = Tensor::from_vector(std::vector<std::int32_t>{0, 4, 2, 2, 1, 3}, {3, 2});
  const LossResult r = softmax_cross_entropy(z, t, true, 0.5f);
  double want = 0;
  std::int64_t correct = 0;
  std::vector<double> grad;
  for (int row = 0; row < 6; ++row) {
    const float* zr = z.data<float>() + row * 5;
    double sum = 0;
    int arg = 0;
    for (int c = 0; c < 5; ++c) {
      sum += std::exp(static_cast<double>(zr[c]));
      if (zr[c] > zr[arg]) arg = c;
    }
    const int target = t.data<std::int32_t>()[row];
    want += std::log(sum) - zr[target];
    correct += arg == target;
    for (int c = 0; c < 5; ++c)
      grad.push_back(0.5 * (std::exp(static_cast<double>(zr[c])) / sum - (c == target)));
  }
  EXPECT_NEAR(r.loss_sum, want, 1e-5);
  EXPECT_EQ(r.correct, correct);
  EXPECT_EQ(r.count, 6);
  expect_close(r.dlogits.to_float_vector(), grad, 1e-6);
  const Tensor bad = Tensor::from_vector(std::vector<std::int32_t>{0, 5, 0, 0, 0, 0}, {3, 2});
  EXPECT_THROW(softmax_cross_entropy(z, bad, false, 1.0f), std::out_of_range);
  EXPECT_THROW(softmax_cross_entropy(z, Tensor::zeros({3}, DType::i32), false, 1.0f),
               std::invalid_argument);
}

TEST(LayerForward, MismatchesNameTheLayerAndShape) {
  const Linear layer(4, 2);
  const auto p = random_params(layer, 1);
  try {
    layer.forward({}, p, Tensor::zeros({3, 5}));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("linear(4->2)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(layer.forward({}, p, Tensor::zeros({3, 4}, DType::i32)), std::invalid_argument);
  EXPECT_THROW(layer.forward({}, std::vector<Tensor>{p[0]}, Tensor::zeros({3, 4})),
               std::invalid_argument);
  // bf16 input is converted, computed in f32.
  EXPECT_EQ(layer.forward({}, p, Tensor::zeros({3, 4}, DType::bf16)).y.dtype(), DType::f32);
}

}  // namespace
}  // namespace tandem::models
