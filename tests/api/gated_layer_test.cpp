// A gated linear unit written as an application would, with the public kernels only
// (include/tandem/kernels.hpp): y = (x W^T + b) * sigmoid(x V^T + c). Its backward matches
// central differences of its forward on cpu, accumulates into gradient sinks as GradSink
// says, and a model with it learns through tandem::Session, on cuda as on cpu.
//
// The finite differences run in f32 with step 1e-2 on inputs of size 1: truncation (h^2 times
// the third derivative) and rounding (1e-7 of the loss over h) stay near 1e-4 of the largest
// gradient, so 2e-3 passes a right backward and fails a missing term or a wrong sign.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "api_test_util.hpp"
#include "tandem/tandem.hpp"

namespace tandem::api_test {
namespace {

class Gated final : public Layer {
 public:
  Gated(std::int64_t in, std::int64_t out) : in_(in), out_(out) {}
  std::string kind() const override { return "gated"; }
  std::string describe() const override {
    return "gated(" + std::to_string(in_) + "->" + std::to_string(out_) + ")";
  }
  // W, b of the value; V, c of the gate.
  std::vector<ParamSpec> param_specs() const override {
    return {{"value_weight", {out_, in_}, ParamInit::uniform_fan_in, 1.0f, in_},
            {"value_bias", {out_}, ParamInit::uniform_fan_in, 1.0f, in_},
            {"gate_weight", {out_, in_}, ParamInit::uniform_fan_in, 1.0f, in_},
            {"gate_bias", {out_}, ParamInit::uniform_fan_in, 1.0f, in_}};
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 2 || in[1] != in_) {
      throw std::invalid_argument(describe() + ": input " + shape_str(in) + ", wants [batch, " +
                                  std::to_string(in_) + "]");
    }
    return {in[0], out_};
  }

  // u = x W^T + b, g = sigmoid(x V^T + c), y = u * g; keeps x, u and g.
  ForwardResult forward(const LayerContext& ctx, ParamView params, const Tensor& x) const override {
    const Kernels& k = ctx.k();
    const Shape shape = output_shape(x.shape());
    Tensor u = k.empty(shape), g = k.empty(shape), y = k.empty(shape);
    k.gemm(false, true, 1.0f, x, params[0], 0.0f, u);
    k.bias_activation(u, params[1], Activation::none, nullptr);
    k.gemm(false, true, 1.0f, x, params[2], 0.0f, g);
    k.bias_activation(g, params[3], Activation::sigmoid, nullptr);
    k.multiply(u, g, y);
    ForwardResult r{y, {}};
    if (ctx.keep_saved) r.saved = {x, u, g};
    return r;
  }

  // dx = du W + dz V, with du = dy * g and dz = (dy * u) * g (1 - g).
  Tensor backward_input(const LayerContext& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override {
    const Kernels& k = ctx.k();
    const Grads d = grads(k, saved, dy);
    Tensor dx = k.empty(saved.at(0).shape());
    k.gemm(false, false, 1.0f, d.du, params[0], 0.0f, dx);
    k.gemm(false, false, 1.0f, d.dz, params[2], 1.0f, dx);
    return dx;
  }

  // dW = du^T x, db = sum_r du; dV = dz^T x, dc = sum_r dz (the last fused with sigmoid').
  void backward_weight_into(const LayerContext& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override {
    const Kernels& k = ctx.k();
    const Tensor& x = saved.at(0);
    Tensor du = k.empty(dy.shape()), dgate = k.empty(dy.shape()), dz = k.empty(dy.shape());
    k.multiply(dy, saved.at(2), du);
    k.multiply(dy, saved.at(1), dgate);
    k.bias_activation_backward(Activation::sigmoid, dgate, saved.at(2), dz, &sink.grads[3],
                               sink.alpha, sink.beta);
    k.gemm(true, false, sink.alpha, du, x, sink.beta, sink.grads[0]);
    k.column_sum(du, sink.alpha, sink.beta, sink.grads[1]);
    k.gemm(true, false, sink.alpha, dz, x, sink.beta, sink.grads[2]);
  }

 private:
  struct Grads {
    Tensor du, dz;
  };
  static Grads grads(const Kernels& k, const Saved& saved, const Tensor& dy) {
    const Tensor& u = saved.at(1);
    const Tensor& g = saved.at(2);
    Grads d{k.empty(dy.shape()), k.empty(dy.shape())};
    k.multiply(dy, g, d.du);
    k.multiply(dy, u, d.dz);
    k.activation_backward(Activation::sigmoid, d.dz, g, d.dz);
    return d;
  }

  std::int64_t in_, out_;
};

constexpr std::int64_t kIn = 4, kOut = 3, kRows = 5;

std::vector<Tensor> gated_params(std::uint32_t seed) {
  return {random_tensor({kOut, kIn}, seed), random_tensor({kOut}, seed + 1),
          random_tensor({kOut, kIn}, seed + 2), random_tensor({kOut}, seed + 3)};
}

// L = sum(y * r) for fixed r, so dL/dy = r.
double loss(const Gated& layer, const std::vector<Tensor>& params, const Tensor& x,
            const std::vector<float>& r) {
  LayerContext ctx;
  ctx.keep_saved = false;
  const std::vector<float> y = layer.forward(ctx, params, x).y.to_float_vector();
  double l = 0;
  for (std::size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * r[i];
  return l;
}

// Central differences of loss() over every element of `t` (one of x or params).
std::vector<float> numeric_grad(const Gated& layer, std::vector<Tensor>& params, Tensor& x,
                                Tensor& t, const std::vector<float>& r) {
  constexpr float kStep = 1e-2f;
  std::vector<float> g(static_cast<std::size_t>(t.numel()));
  float* v = t.data<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const float keep = v[i];
    v[i] = keep + kStep;
    const double up = loss(layer, params, x, r);
    v[i] = keep - kStep;
    const double down = loss(layer, params, x, r);
    v[i] = keep;
    g[i] = static_cast<float>((up - down) / (2.0 * kStep));
  }
  return g;
}

TEST(GatedLayer, BackwardMatchesFiniteDifferences) {
  const Gated layer(kIn, kOut);
  Tensor x = random_tensor({kRows, kIn}, 1);
  std::vector<Tensor> params = gated_params(2);
  const Tensor dy = random_tensor({kRows, kOut}, 9);
  const std::vector<float> r = dy.to_float_vector();

  const LayerContext ctx;
  ForwardResult f = layer.forward(ctx, params, x);
  const Tensor dx = layer.backward_input(ctx, params, f.saved, dy);
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(Tensor::full(p.shape(), std::nanf("")));
  layer.backward_weight_into(ctx, f.saved, dy, {grads, 1.0f, 0.0f});

  EXPECT_LE(rel_error(dx.to_float_vector(), numeric_grad(layer, params, x, x, r)), 2e-3) << "x";
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_LE(rel_error(grads[i].to_float_vector(), numeric_grad(layer, params, x, params[i], r)),
              2e-3)
        << layer.param_specs()[i].name;
  }
}

// grads = alpha * dL/dp + beta * grads, from grads of 1: alpha -0.5, beta 1.
TEST(GatedLayer, WeightGradientsAccumulateIntoTheSink) {
  const Gated layer(kIn, kOut);
  const Tensor x = random_tensor({kRows, kIn}, 11);
  const std::vector<Tensor> params = gated_params(12);
  const Tensor dy = random_tensor({kRows, kOut}, 19);
  const LayerContext ctx;
  ForwardResult f = layer.forward(ctx, params, x);
  std::vector<Tensor> fresh, acc;
  for (const Tensor& p : params) {
    fresh.push_back(Tensor::zeros(p.shape()));
    acc.push_back(Tensor::full(p.shape(), 1.0f));
  }
  layer.backward_weight_into(ctx, f.saved, dy, {fresh, 1.0f, 0.0f});
  layer.backward_weight_into(ctx, f.saved, dy, {acc, -0.5f, 1.0f});
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::vector<float> want = fresh[i].to_float_vector();
    for (float& v : want) v = -0.5f * v + 1.0f;
    EXPECT_LE(rel_error(acc[i].to_float_vector(), want), 1e-6) << layer.param_specs()[i].name;
  }
}

constexpr std::int64_t kWidth = 16;
constexpr std::int64_t kSteps = 40;

// Mean of the first and of the last five losses.
std::pair<double, double> ends(const std::vector<double>& losses) {
  double first = 0, last = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    first += losses[i] / 5;
    last += losses[losses.size() - 1 - i] / 5;
  }
  return {first, last};
}

TEST(GatedLayer, ItsLossFallsOnCpu) {
  const Trained t =
      train(model_with(std::make_shared<Gated>(kWidth, kWidth), kWidth), "cpu", kSteps);
  ASSERT_EQ(t.losses.size(), static_cast<std::size_t>(kSteps));
  const auto [first, last] = ends(t.losses);
  EXPECT_LT(last, 0.7 * first) << "first " << first << ", last " << last;
}

// Three minibatches alike (as custom_layer_test.cpp compares them: longer runs drift apart by
// the devices' rounding), then the loss falls on cuda too.
TEST(GatedLayer, ItTrainsOnCudaAsOnCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Model model = model_with(std::make_shared<Gated>(kWidth, kWidth), kWidth);
  expect_trained_alike(train(model, "cuda:0", 3), train(model, "cpu", 3));
  const auto [first, last] = ends(train(model, "cuda:0", kSteps).losses);
  EXPECT_LT(last, 0.7 * first) << "first " << first << ", last " << last;
}

}  // namespace
}  // namespace tandem::api_test
