// The public kernels that gated, normalising and attention blocks need (multiply, sigmoid and
// tanh, softmax, exp and log, fill, row max and mean; include/tandem/kernels.hpp): on cpu each
// against a plain loop on random inputs, in place where the header allows it, with beta = 0
// over NaN; their refusals of tensors that do not fit; and on cuda:0, where there is one, a
// layer built of all of them trains as it does on cpu (a test of this API reaches a device's
// kernels only through a Session). Public headers only.
//
// Tolerances are relative to the largest wanted value (api_test_util.hpp): the kernels' exp is
// a polynomial (about 4 ulp), their sums run in 16 lanes, so they differ from the loops' libm
// calls and sequential sums by a few ulps; 1e-5 leaves room for that and nothing more.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "api_test_util.hpp"
#include "tandem/tandem.hpp"

namespace tandem::api_test {
namespace {

constexpr double kTolerance = 1e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const Kernels& cpu() {
  return Kernels::cpu();
}

Tensor nan_tensor(const Shape& shape) {
  return Tensor::full(shape, kNaN);
}

std::vector<float> values(const Tensor& t) {
  return t.to_float_vector();
}

// The [rows, cols] matrices of the row kernels: rank 1 to 3, a single column, long rows.
const std::vector<Shape> kShapes = {{7}, {3, 5}, {2, 3, 9}, {4, 1}, {5, 300}};

TEST(PublicKernels, MultiplyIsTheElementWiseProduct) {
  const Tensor a = random_tensor({4, 9}, 1), b = random_tensor({4, 9}, 2);
  const std::vector<float> va = values(a), vb = values(b);
  std::vector<float> want(va.size());
  for (std::size_t i = 0; i < va.size(); ++i) want[i] = va[i] * vb[i];
  Tensor out = nan_tensor({36});  // another shape, the same number of elements
  cpu().multiply(a, b, out);
  EXPECT_LE(rel_error(values(out), want), kTolerance);
  Tensor in_a = a.clone(), in_b = b.clone();
  cpu().multiply(in_a, b, in_a);
  cpu().multiply(a, in_b, in_b);
  EXPECT_LE(rel_error(values(in_a), want), kTolerance);
  EXPECT_LE(rel_error(values(in_b), want), kTolerance);
}

TEST(PublicKernels, MultiplyAccumulates) {
  const Tensor a = random_tensor({5, 6}, 3), b = random_tensor({5, 6}, 4);
  const Tensor start = random_tensor({5, 6}, 5);
  const std::vector<float> va = values(a), vb = values(b), vs = values(start);
  std::vector<float> want(va.size()), fresh(va.size());
  for (std::size_t i = 0; i < va.size(); ++i) {
    want[i] = -0.5f * va[i] * vb[i] + 2.0f * vs[i];
    fresh[i] = 3.0f * va[i] * vb[i];
  }
  Tensor out = start.clone();
  cpu().multiply(a, b, -0.5f, 2.0f, out);
  EXPECT_LE(rel_error(values(out), want), kTolerance);
  Tensor nan = nan_tensor({5, 6});
  cpu().multiply(a, b, 3.0f, 0.0f, nan);
  EXPECT_LE(rel_error(values(nan), fresh), kTolerance) << "beta = 0 read out";
}

// Inputs across the range where sigmoid and tanh saturate, and near zero where tanh's
// formula would cancel.
std::vector<float> activation_inputs() {
  std::vector<float> v = random_values(200, 6, -6.0f, 6.0f);
  for (float x : {0.0f, 1e-6f, -1e-3f, 0.06f, -0.07f, 20.0f, -20.0f, 90.0f, -90.0f}) {
    v.push_back(x);
  }
  return v;
}

double activation_ref(Activation act, double x) {
  return act == Activation::sigmoid ? 1.0 / (1.0 + std::exp(-x)) : std::tanh(x);
}

double activation_grad_ref(Activation act, double y) {
  return act == Activation::sigmoid ? y * (1.0 - y) : 1.0 - y * y;
}

class SigmoidTanh : public ::testing::TestWithParam<Activation> {};

TEST_P(SigmoidTanh, ForwardIsTheFormulaInPlaceToo) {
  const Activation act = GetParam();
  const std::vector<float> xs = activation_inputs();
  const auto n = static_cast<std::int64_t>(xs.size());
  const Tensor x = Tensor::from_vector(xs, {n});
  std::vector<float> want(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    want[i] = static_cast<float>(activation_ref(act, xs[i]));
  }
  Tensor y = nan_tensor({n});
  cpu().activation(act, x, y);
  const std::vector<float> got = values(y);
  EXPECT_LE(rel_error(got, want), kTolerance);
  for (std::size_t i = 0; i < xs.size(); ++i) {  // relative error of each: tiny x and tails
    EXPECT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i]) + 1e-30) << "x = " << xs[i];
  }
  Tensor in_place = x.clone();
  cpu().activation(act, in_place, in_place);
  EXPECT_EQ(values(in_place), got);
}

TEST_P(SigmoidTanh, BackwardReadsTheOutput) {
  const Activation act = GetParam();
  const Tensor y = random_tensor({6, 11}, 7, act == Activation::sigmoid ? 0.0f : -1.0f, 1.0f);
  const Tensor dy = random_tensor({6, 11}, 8);
  const std::vector<float> vy = values(y), vdy = values(dy);
  std::vector<float> want(vy.size());
  for (std::size_t i = 0; i < vy.size(); ++i) {
    want[i] = static_cast<float>(vdy[i] * activation_grad_ref(act, vy[i]));
  }
  Tensor dx = nan_tensor({6, 11});
  cpu().activation_backward(act, dy, y, dx);
  EXPECT_LE(rel_error(values(dx), want), kTolerance);
  Tensor in_place = dy.clone();
  cpu().activation_backward(act, in_place, y, in_place);
  EXPECT_LE(rel_error(values(in_place), want), kTolerance);
}

// bias_activation needs no `pre` for them (their backward reads y), and the fused backward
// sums the bias gradient.
TEST_P(SigmoidTanh, BiasActivationFusesThem) {
  const Activation act = GetParam();
  const Tensor z = random_tensor({5, 4}, 9, -3.0f, 3.0f), bias = random_tensor({4}, 10);
  const std::vector<float> vz = values(z), vb = values(bias);
  std::vector<float> want(vz.size());
  for (std::size_t i = 0; i < vz.size(); ++i) {
    want[i] = static_cast<float>(activation_ref(act, vz[i] + vb[i % 4]));
  }
  Tensor y = z.clone();
  cpu().bias_activation(y, bias, act, nullptr);
  EXPECT_LE(rel_error(values(y), want), kTolerance);

  const Tensor dy = random_tensor({5, 4}, 11);
  const std::vector<float> vy = values(y), vdy = values(dy);
  std::vector<float> dz(vy.size()), db(4, 0.0f);
  for (std::size_t i = 0; i < vy.size(); ++i) {
    dz[i] = static_cast<float>(vdy[i] * activation_grad_ref(act, vy[i]));
    db[i % 4] += dz[i];
  }
  Tensor got_dz = nan_tensor({5, 4}), got_db = nan_tensor({4});
  cpu().bias_activation_backward(act, dy, y, got_dz, &got_db, 1.0f, 0.0f);
  EXPECT_LE(rel_error(values(got_dz), dz), kTolerance);
  EXPECT_LE(rel_error(values(got_db), db), kTolerance);
}

std::string activation_test_name(const ::testing::TestParamInfo<Activation>& p) {
  return p.param == Activation::sigmoid ? "sigmoid" : "tanh";
}

INSTANTIATE_TEST_SUITE_P(PublicKernels, SigmoidTanh,
                         ::testing::Values(Activation::sigmoid, Activation::tanh),
                         activation_test_name);

// [rows, cols] of t, as the kernels read it.
std::pair<std::int64_t, std::int64_t> rows_cols(const Shape& s) {
  const std::int64_t cols = s.back();
  return {shape_numel(s) / cols, cols};
}

std::vector<float> softmax_ref(const std::vector<float>& x, std::int64_t rows, std::int64_t cols) {
  std::vector<float> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[static_cast<std::size_t>(r * cols)];
    double mx = xr[0], sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) mx = std::max<double>(mx, xr[c]);
    for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
    for (std::int64_t c = 0; c < cols; ++c) {
      y[static_cast<std::size_t>(r * cols + c)] = static_cast<float>(std::exp(xr[c] - mx) / sum);
    }
  }
  return y;
}

TEST(PublicKernels, SoftmaxNormalisesEveryRowInPlaceToo) {
  std::uint32_t seed = 20;
  for (const Shape& shape : kShapes) {
    const Tensor x = random_tensor(shape, ++seed, -4.0f, 4.0f);
    const auto [rows, cols] = rows_cols(shape);
    const std::vector<float> want = softmax_ref(values(x), rows, cols);
    Tensor y = nan_tensor(shape);
    cpu().softmax(x, y);
    EXPECT_LE(rel_error(values(y), want), kTolerance) << shape_str(shape);
    Tensor in_place = x.clone();
    cpu().softmax(in_place, in_place);
    EXPECT_EQ(values(in_place), values(y)) << shape_str(shape);
  }
}

TEST(PublicKernels, SoftmaxDoesNotOverflow) {
  const Tensor x = Tensor::from_vector(
      std::vector<float>{1000.0f, 999.0f, -1000.0f, 88.0f, 89.0f, 90.0f}, {2, 3});
  Tensor y = nan_tensor({2, 3});
  cpu().softmax(x, y);
  const std::vector<float> want = softmax_ref(values(x), 2, 3);
  EXPECT_LE(rel_error(values(y), want), kTolerance);
}

TEST(PublicKernels, SoftmaxBackwardIsTheJacobianProduct) {
  std::uint32_t seed = 40;
  for (const Shape& shape : kShapes) {
    const auto [rows, cols] = rows_cols(shape);
    const Tensor y = Tensor::from_vector(
        softmax_ref(random_values(shape_numel(shape), ++seed), rows, cols), shape);
    const Tensor dy = random_tensor(shape, ++seed);
    const std::vector<float> vy = values(y), vdy = values(dy);
    std::vector<float> want(vy.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      double dot = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto i = static_cast<std::size_t>(r * cols + c);
        dot += static_cast<double>(vy[i]) * vdy[i];
      }
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto i = static_cast<std::size_t>(r * cols + c);
        want[i] = static_cast<float>(vy[i] * (vdy[i] - dot));
      }
    }
    Tensor dx = nan_tensor(shape);
    cpu().softmax_backward(dy, y, dx);
    // Scaled by the largest |y dy|: where the terms cancel, want is far below its inputs.
    EXPECT_LE(rel_error(values(dx), want), 1e-4) << shape_str(shape);
    Tensor in_place = dy.clone();
    cpu().softmax_backward(in_place, y, in_place);
    EXPECT_EQ(values(in_place), values(dx)) << shape_str(shape);
  }
}

TEST(PublicKernels, ExpAndLogAreTheFunctionsInPlaceToo) {
  const Tensor x = random_tensor({6, 13}, 60, -10.0f, 10.0f);
  const Tensor pos = random_tensor({6, 13}, 61, 1e-3f, 50.0f);
  const std::vector<float> vx = values(x), vp = values(pos);
  std::vector<float> want_exp(vx.size()), want_log(vp.size());
  for (std::size_t i = 0; i < vx.size(); ++i) {
    want_exp[i] = std::exp(vx[i]);
    want_log[i] = std::log(vp[i]);
  }
  Tensor e = nan_tensor({6, 13}), l = nan_tensor({78});
  cpu().exp(x, e);
  cpu().log(pos, l);
  const std::vector<float> ve = values(e);
  for (std::size_t i = 0; i < vx.size(); ++i) {
    EXPECT_NEAR(ve[i], want_exp[i], 1e-6 * want_exp[i]) << "exp " << vx[i];
  }
  EXPECT_LE(rel_error(values(l), want_log), kTolerance);
  Tensor in_place = x.clone();
  cpu().exp(in_place, in_place);
  EXPECT_EQ(values(in_place), ve);
  in_place = pos.clone();
  cpu().log(in_place, in_place);
  EXPECT_EQ(values(in_place), values(l));
}

TEST(PublicKernels, ExpAndLogAtTheEdges) {
  const Tensor x = Tensor::from_vector(std::vector<float>{100.0f, -120.0f, 0.0f, 88.5f}, {4});
  Tensor e = nan_tensor({4});
  cpu().exp(x, e);
  const std::vector<float> ve = values(e);
  EXPECT_EQ(ve[0], std::numeric_limits<float>::infinity());
  EXPECT_LE(ve[1], 1e-38f);
  EXPECT_GE(ve[1], 0.0f);
  EXPECT_EQ(ve[2], 1.0f);
  EXPECT_NEAR(ve[3], std::exp(88.5f), 1e-6 * std::exp(88.5f));
  const Tensor p = Tensor::from_vector(std::vector<float>{0.0f, -1.0f, 1.0f}, {3});
  Tensor l = nan_tensor({3});
  cpu().log(p, l);
  const std::vector<float> vl = values(l);
  EXPECT_EQ(vl[0], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(vl[1]));
  EXPECT_EQ(vl[2], 0.0f);
}

TEST(PublicKernels, FillWritesEveryElement) {
  Tensor x = nan_tensor({3, 70000});  // past one parallel chunk
  cpu().fill(x, -2.5f);
  EXPECT_EQ(values(x), std::vector<float>(3 * 70000, -2.5f));
}

TEST(PublicKernels, RowMaxAndRowMean) {
  std::uint32_t seed = 70;
  for (const Shape& shape : kShapes) {
    const Tensor x = random_tensor(shape, ++seed, -5.0f, 5.0f);
    const auto [rows, cols] = rows_cols(shape);
    const Tensor start = random_tensor({rows}, ++seed);
    const std::vector<float> vx = values(x), vs = values(start);
    std::vector<float> max(static_cast<std::size_t>(rows)), mean(max.size()), acc(max.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      double m = vx[static_cast<std::size_t>(r * cols)], s = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double v = vx[static_cast<std::size_t>(r * cols + c)];
        m = std::max(m, v);
        s += v;
      }
      const auto i = static_cast<std::size_t>(r);
      max[i] = static_cast<float>(m);
      mean[i] = static_cast<float>(2.0 * s / static_cast<double>(cols));
      acc[i] = static_cast<float>(-s / static_cast<double>(cols) + 0.5 * vs[i]);
    }
    Tensor got_max = nan_tensor({rows}), got_mean = nan_tensor({rows}), got_acc = start.clone();
    cpu().row_max(x, got_max);
    cpu().row_mean(x, 2.0f, 0.0f, got_mean);
    cpu().row_mean(x, -1.0f, 0.5f, got_acc);
    EXPECT_EQ(values(got_max), max) << shape_str(shape);
    EXPECT_LE(rel_error(values(got_mean), mean), kTolerance) << shape_str(shape);
    EXPECT_LE(rel_error(values(got_acc), acc), kTolerance) << shape_str(shape);
  }
}

// Each new kernel names itself, the argument and the tensor when one does not fit.
TEST(PublicKernels, NewKernelsRefuseTensorsThatDoNotFit) {
  const Kernels& k = cpu();
  Tensor a = k.zeros({2, 3}), short_one = k.zeros({5}), rows = k.zeros({2}), none;
  Tensor ids = k.empty({2, 3}, DType::i32);
  EXPECT_EQ(refusal([&] { k.multiply(a, a, short_one); }),
            "Kernels::multiply: out is f32[5] cpu, wants 6 elements");
  EXPECT_EQ(refusal([&] { k.multiply(a, short_one, 1.0f, 1.0f, a); }),
            "Kernels::multiply: b is f32[5] cpu, wants 6 elements");
  EXPECT_EQ(refusal([&] { k.multiply(a, ids, a); }),
            "Kernels::multiply: b is i32[2, 3] cpu, wants f32");
  EXPECT_EQ(refusal([&] { k.multiply(none, a, a); }), "Kernels::multiply: a is undefined");
  EXPECT_EQ(refusal([&] { k.activation(Activation::sigmoid, a, short_one); }),
            "Kernels::activation: y is f32[5] cpu, wants 6 elements");
  EXPECT_EQ(refusal([&] { k.activation_backward(Activation::tanh, a, none, a); }),
            "Kernels::activation_backward: saved is undefined");
  EXPECT_EQ(refusal([&] { k.exp(a, short_one); }),
            "Kernels::exp: y is f32[5] cpu, wants 6 elements");
  EXPECT_EQ(refusal([&] { k.exp(ids, a); }), "Kernels::exp: x is i32[2, 3] cpu, wants f32");
  EXPECT_EQ(refusal([&] { k.log(a, none); }), "Kernels::log: y is undefined");
  EXPECT_EQ(refusal([&] { k.log(a, ids); }), "Kernels::log: y is i32[2, 3] cpu, wants f32");
  EXPECT_EQ(refusal([&] { k.fill(ids, 1.0f); }), "Kernels::fill: x is i32[2, 3] cpu, wants f32");
  EXPECT_EQ(refusal([&] { k.fill(none, 1.0f); }), "Kernels::fill: x is undefined");
  EXPECT_EQ(refusal([&] { k.softmax(a, short_one); }),
            "Kernels::softmax: y is f32[5] cpu, wants 6 elements");
  EXPECT_EQ(refusal([&] { k.softmax(none, a); }), "Kernels::softmax: x is undefined");
  EXPECT_EQ(refusal([&] { k.softmax_backward(a, short_one, a); }),
            "Kernels::softmax_backward: y is f32[5] cpu, wants 6 elements");
  EXPECT_EQ(refusal([&] { k.softmax_backward(a, a, ids); }),
            "Kernels::softmax_backward: dx is i32[2, 3] cpu, wants f32");
  EXPECT_EQ(refusal([&] { k.row_max(a, short_one); }),
            "Kernels::row_max: out is f32[5] cpu, wants 2 elements");
  EXPECT_EQ(refusal([&] { k.row_max(ids, rows); }),
            "Kernels::row_max: x is i32[2, 3] cpu, wants f32");
  EXPECT_EQ(refusal([&] { k.row_mean(a, 1.0f, 0.0f, short_one); }),
            "Kernels::row_mean: out is f32[5] cpu, wants 2 elements");
  EXPECT_EQ(refusal([&] { k.row_mean(a, 1.0f, 0.0f, none); }),
            "Kernels::row_mean: out is undefined");
  Tensor no_cols = k.zeros({2, 0});
  EXPECT_EQ(refusal([&] { k.row_max(no_cols, rows); }),
            "Kernels::row_max: x is f32[2, 0] cpu, wants at least one column");
  EXPECT_EQ(refusal([&] { k.row_mean(no_cols, 1.0f, 0.0f, rows); }),
            "Kernels::row_mean: x is f32[2, 0] cpu, wants at least one column");
  Tensor sim = Tensor::empty({2, 3}, DType::f32, Device::sim());
  EXPECT_EQ(refusal([&] { k.softmax(sim, a); }),
            "Kernels::softmax: x is f32[2, 3] sim, the kernels run on cpu");
}

// Every new kernel in one layer, for comparing devices: forward
//   y = sigmoid(x) * softmax(x) + log(sigmoid(x)) * exp(tanh(x)) + (row_max(x) - row_mean(x)),
// the last term broadcast over the columns by a GEMM with a row of ones (fill). Its backward
// is a fixed linear map of dy through the backward kernels, not this forward's gradient: the
// test compares the devices, not the calculus (the gated layer's test checks a gradient).
class KernelProbe final : public Layer {
 public:
  std::string kind() const override { return "kernel_probe"; }
  std::string describe() const override { return "kernel_probe"; }
  Shape output_shape(const Shape& in) const override { return in; }

  ForwardResult forward(const LayerContext& ctx, ParamView, const Tensor& x) const override {
    const Kernels& k = ctx.k();
    const std::int64_t rows = x.dim(0), cols = x.dim(1);
    Tensor s = k.empty(x.shape()), g = k.empty(x.shape()), t = k.empty(x.shape());
    k.softmax(x, s);
    k.activation(Activation::sigmoid, x, g);
    k.activation(Activation::tanh, x, t);
    Tensor y = k.empty(x.shape()), e = k.empty(x.shape());
    k.multiply(g, s, y);
    k.exp(t, e);
    k.log(g, t);  // t is free once e holds exp(tanh(x))
    k.multiply(t, e, 1.0f, 1.0f, y);
    Tensor spread = k.empty({rows, 1}), ones = k.empty({1, cols});
    k.row_max(x, spread);
    k.row_mean(x, -1.0f, 1.0f, spread);
    k.fill(ones, 1.0f);
    k.gemm(false, false, 1.0f, spread, ones, 1.0f, y);
    ForwardResult out{y, {}};
    if (ctx.keep_saved) out.saved = {s, g};
    return out;
  }

  // dx = softmax_backward(dy, s) + sigmoid'(.) dy - 0.5 dy (s + 1) tanh'(.) of g (a map only).
  Tensor backward_input(const LayerContext& ctx, ParamView, Saved& saved,
                        const Tensor& dy) const override {
    const Kernels& k = ctx.k();
    const Tensor& s = saved.at(0);
    const Tensor& g = saved.at(1);
    Tensor dx = k.empty(dy.shape()), tmp = k.empty(dy.shape());
    k.softmax_backward(dy, s, dx);
    k.activation_backward(Activation::sigmoid, dy, g, tmp);
    k.add(dx, tmp, dx);
    k.activation_backward(Activation::tanh, dy, g, tmp);
    k.multiply(tmp, s, -0.5f, 1.0f, dx);
    k.multiply(tmp, dy, 0.0f, 1.0f, dx);  // beta = 1, alpha = 0: dx unchanged
    return dx;
  }
};

constexpr std::int64_t kProbeWidth = 16;

TEST(PublicKernels, ProbeTrainsOnCpu) {
  const Trained t = train(model_with(std::make_shared<KernelProbe>(), kProbeWidth), "cpu", 3);
  ASSERT_EQ(t.losses.size(), 3u);
  for (double loss : t.losses) EXPECT_TRUE(std::isfinite(loss));
}

TEST(PublicKernels, NewKernelsRunOnCudaAsOnCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Model model = model_with(std::make_shared<KernelProbe>(), kProbeWidth);
  expect_trained_alike(train(model, "cuda:0", 3), train(model, "cpu", 3));
}

}  // namespace
}  // namespace tandem::api_test
