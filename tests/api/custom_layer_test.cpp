// Custom layers through the public kernel interface (include/tandem/kernels.hpp): the same
// residual block written with raw loops and with Kernels computes the same values on cpu, and
// trains the same on cuda as on cpu; a layer that breaks the device contract is named in the
// run's error. Only the public headers are used, as an application would.
//
// Tolerance, not bit equality, between the loop and the kernel versions: the kernels' GEMM
// (OpenBLAS, blocked) and column sums (fixed chunks) add the products in another order than the
// plain loops, so results differ by a few ulps. Errors are measured as max |got - want| over
// max |want| (near-zero elements neither dominate nor escape); the bounds are those of
// tests/actors/pipeline_cuda_test.cpp: 1e-5 on values and losses, 1e-4 on weights after three
// updates. A wrong transpose, a missing bias or relu mask, or ignoring alpha/beta is off by
// orders of magnitude more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "api_test_util.hpp"
#include "tandem/tandem.hpp"

namespace {

constexpr std::int64_t kFeatures = 8;
constexpr std::int64_t kWidth = 16;
constexpr std::int64_t kClasses = 4;
constexpr std::int64_t kMinibatch = 16;

using tandem::api_test::rel_error;

std::vector<tandem::ParamSpec> residual_params(std::int64_t d) {
  return {{"weight", {d, d}, tandem::ParamInit::uniform_fan_in, 1.0f, d},
          {"bias", {d}, tandem::ParamInit::uniform_fan_in, 1.0f, d}};
}

tandem::Shape residual_shape(const std::string& name, std::int64_t d, const tandem::Shape& in) {
  if (in.size() != 2 || in[1] != d) {
    throw std::invalid_argument(name + ": input " + tandem::shape_str(in) + ", wants [batch, " +
                                std::to_string(d) + "]");
  }
  return in;
}

// y = x + relu(x W^T + b), with the kernels: runs wherever its stage does.
class KernelResidual final : public tandem::Layer {
 public:
  explicit KernelResidual(std::int64_t d) : d_(d) {}
  std::string kind() const override { return "kernel_residual"; }
  std::string describe() const override { return "kernel_residual(" + std::to_string(d_) + ")"; }
  std::vector<tandem::ParamSpec> param_specs() const override { return residual_params(d_); }
  tandem::Shape output_shape(const tandem::Shape& in) const override {
    return residual_shape(describe(), d_, in);
  }

  tandem::ForwardResult forward(const tandem::LayerContext& ctx, tandem::ParamView params,
                                const tandem::Tensor& x) const override {
    const tandem::Kernels& k = ctx.k();
    tandem::Tensor h = k.empty(x.shape());
    k.gemm(false, true, 1.0f, x, params[0], 0.0f, h);
    k.bias_activation(h, params[1], tandem::Activation::relu, nullptr);
    tandem::Tensor y = k.empty(x.shape());
    k.add(x, h, y);
    tandem::ForwardResult out{y, {}};
    if (ctx.keep_saved) out.saved = {x, h};
    return out;
  }

  // dx = dy + dz W, dz = dy where h > 0.
  tandem::Tensor backward_input(const tandem::LayerContext& ctx, tandem::ParamView params,
                                tandem::Saved& saved, const tandem::Tensor& dy) const override {
    const tandem::Kernels& k = ctx.k();
    tandem::Tensor dz = k.empty(dy.shape());
    k.activation_backward(tandem::Activation::relu, dy, saved.at(1), dz);
    tandem::Tensor dx = k.empty(dy.shape());
    k.copy(dy, dx);
    k.gemm(false, false, 1.0f, dz, params[0], 1.0f, dx);
    return dx;
  }

  // dW = dz^T x, db = the column sums of dz.
  void backward_weight_into(const tandem::LayerContext& ctx, const tandem::Saved& saved,
                            const tandem::Tensor& dy, const tandem::GradSink& sink) const override {
    const tandem::Kernels& k = ctx.k();
    tandem::Tensor dz = k.empty(dy.shape());
    k.bias_activation_backward(tandem::Activation::relu, dy, saved.at(1), dz, &sink.grads[1],
                               sink.alpha, sink.beta);
    k.gemm(true, false, sink.alpha, dz, saved.at(0), sink.beta, sink.grads[0]);
  }

 private:
  std::int64_t d_;
};

// The same block with plain loops on data<float>(): cpu only.
class LoopResidual final : public tandem::Layer {
 public:
  explicit LoopResidual(std::int64_t d) : d_(d) {}
  std::string kind() const override { return "loop_residual"; }
  std::string describe() const override { return "loop_residual(" + std::to_string(d_) + ")"; }
  std::vector<tandem::ParamSpec> param_specs() const override { return residual_params(d_); }
  tandem::Shape output_shape(const tandem::Shape& in) const override {
    return residual_shape(describe(), d_, in);
  }

  tandem::ForwardResult forward(const tandem::LayerContext& ctx, tandem::ParamView params,
                                const tandem::Tensor& x) const override {
    const std::int64_t rows = x.dim(0);
    tandem::Tensor h = tandem::Tensor::empty({rows, d_});
    tandem::Tensor y = tandem::Tensor::empty({rows, d_});
    const float* w = params[0].data<float>();
    const float* b = params[1].data<float>();
    const float* xs = x.data<float>();
    float* hs = h.data<float>();
    float* ys = y.data<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t o = 0; o < d_; ++o) {
        float z = 0;
        for (std::int64_t i = 0; i < d_; ++i) z += xs[r * d_ + i] * w[o * d_ + i];
        hs[r * d_ + o] = std::max(z + b[o], 0.0f);
        ys[r * d_ + o] = xs[r * d_ + o] + hs[r * d_ + o];
      }
    }
    tandem::ForwardResult out{y, {}};
    if (ctx.keep_saved) out.saved = {x, h};
    return out;
  }

  tandem::Tensor backward_input(const tandem::LayerContext&, tandem::ParamView params,
                                tandem::Saved& saved, const tandem::Tensor& dy) const override {
    const float* w = params[0].data<float>();
    const float* h = saved.at(1).data<float>();
    const float* g = dy.data<float>();
    tandem::Tensor dx = dy.clone();
    float* dxs = dx.data<float>();
    for (std::int64_t r = 0; r < dy.dim(0); ++r) {
      for (std::int64_t o = 0; o < d_; ++o) {
        if (h[r * d_ + o] <= 0) continue;
        for (std::int64_t i = 0; i < d_; ++i) dxs[r * d_ + i] += g[r * d_ + o] * w[o * d_ + i];
      }
    }
    return dx;
  }

  void backward_weight_into(const tandem::LayerContext&, const tandem::Saved& saved,
                            const tandem::Tensor& dy, const tandem::GradSink& sink) const override {
    const float* x = saved.at(0).data<float>();
    const float* h = saved.at(1).data<float>();
    const float* g = dy.data<float>();
    std::vector<float> dw(static_cast<std::size_t>(d_ * d_), 0.0f);
    std::vector<float> db(static_cast<std::size_t>(d_), 0.0f);
    for (std::int64_t r = 0; r < dy.dim(0); ++r) {
      for (std::int64_t o = 0; o < d_; ++o) {
        const float dz = h[r * d_ + o] > 0 ? g[r * d_ + o] : 0.0f;
        db[static_cast<std::size_t>(o)] += dz;
        for (std::int64_t i = 0; i < d_; ++i) {
          dw[static_cast<std::size_t>(o * d_ + i)] += dz * x[r * d_ + i];
        }
      }
    }
    const auto write = [&](tandem::Tensor& dst, const std::vector<float>& src) {
      float* p = dst.data<float>();
      for (std::size_t i = 0; i < src.size(); ++i) {
        p[i] = sink.alpha * src[i] + (sink.beta == 0.0f ? 0.0f : sink.beta * p[i]);
      }
    };
    write(sink.grads[0], dw);
    write(sink.grads[1], db);
  }

 private:
  std::int64_t d_;
};

tandem::Tensor random_tensor(tandem::Shape shape, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(tandem::shape_numel(shape)));
  for (float& x : v) x = dist(gen);
  return tandem::Tensor::from_vector(v, std::move(shape));
}

struct Pass {
  std::vector<float> y, dx, dw, db;
};

// Forward, backward_input, and backward_weight_into accumulating into gradients that start at
// 1 (alpha -0.5, beta 1), on the cpu, called directly as a unit test of a layer would.
Pass run_layer(const tandem::Layer& layer) {
  const tandem::Tensor x = random_tensor({5, kWidth}, 1);
  const std::vector<tandem::Tensor> params = {random_tensor({kWidth, kWidth}, 2),
                                              random_tensor({kWidth}, 3)};
  const tandem::Tensor dy = random_tensor({5, kWidth}, 4);
  const tandem::LayerContext ctx;  // Kernels::cpu()
  tandem::ForwardResult f = layer.forward(ctx, params, x);
  const tandem::Tensor dx = layer.backward_input(ctx, params, f.saved, dy);
  std::vector<tandem::Tensor> grads = {tandem::Tensor::full({kWidth, kWidth}, 1.0f),
                                       tandem::Tensor::full({kWidth}, 1.0f)};
  layer.backward_weight_into(ctx, f.saved, dy, {grads, -0.5f, 1.0f});
  return {f.y.to_float_vector(), dx.to_float_vector(), grads[0].to_float_vector(),
          grads[1].to_float_vector()};
}

TEST(CustomLayer, KernelsComputeWhatTheLoopsDoOnCpu) {
  const Pass loops = run_layer(LoopResidual(kWidth));
  const Pass kernels = run_layer(KernelResidual(kWidth));
  EXPECT_LE(rel_error(kernels.y, loops.y), 1e-5);
  EXPECT_LE(rel_error(kernels.dx, loops.dx), 1e-5);
  EXPECT_LE(rel_error(kernels.dw, loops.dw), 1e-5);
  EXPECT_LE(rel_error(kernels.db, loops.db), 1e-5);
}

tandem::Batch make_batch(std::int64_t b) {
  std::mt19937 gen(static_cast<std::uint32_t>(100 + b));
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(kMinibatch * kFeatures));
  std::vector<std::int32_t> y(static_cast<std::size_t>(kMinibatch));
  for (float& v : x) v = normal(gen);
  for (std::int64_t r = 0; r < kMinibatch; ++r) {
    const float* row = &x[static_cast<std::size_t>(r * kFeatures)];
    y[static_cast<std::size_t>(r)] =
        static_cast<std::int32_t>(std::max_element(row, row + kClasses) - row);
  }
  return {tandem::Tensor::from_vector(x, {kMinibatch, kFeatures}),
          tandem::Tensor::from_vector(y, {kMinibatch})};
}

tandem::Model model_with(tandem::LayerPtr custom) {
  return tandem::Model::classifier(
      kFeatures, {tandem::layers::linear(kFeatures, kWidth, tandem::layers::Activation::relu),
                  std::move(custom), tandem::layers::linear(kWidth, kClasses)});
}

struct Trained {
  std::vector<double> losses;
  std::vector<float> weights;  // all of them, in order
};

// Three minibatches of two slices through one stage on `device`.
Trained train(const tandem::Model& model, const std::string& device) {
  tandem::TrainOptions o;
  o.plan.stages = {{0, model.num_layers(), {tandem::Device::parse(device)}}};
  o.plan.schedule = tandem::Schedule::one_f_one_b;
  o.plan.minibatch = kMinibatch;
  o.plan.slices = 2;
  o.minibatches = 3;
  o.optimizer = tandem::SgdOptions{.lr = 0.1, .momentum = 0.9};
  o.seed = 11;
  o.data = make_batch;
  o.threads = 2;
  tandem::Session session(model, std::move(o));
  Trained t;
  t.losses = session.run().losses;
  for (const tandem::NamedTensor& w : session.weights()) {
    const std::vector<float> v = w.value.to_float_vector();
    t.weights.insert(t.weights.end(), v.begin(), v.end());
  }
  return t;
}

void expect_trained_alike(const Trained& got, const Trained& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::max(1.0, std::fabs(want.losses[i])))
        << "minibatch " << i;
  }
  EXPECT_LE(rel_error(got.weights, want.weights), 1e-4);
}

TEST(CustomLayer, KernelsTrainAsTheLoopsDoOnCpu) {
  const Trained loops = train(model_with(std::make_shared<LoopResidual>(kWidth)), "cpu");
  const Trained kernels = train(model_with(std::make_shared<KernelResidual>(kWidth)), "cpu");
  expect_trained_alike(kernels, loops);
}

TEST(CustomLayer, KernelsTrainOnCudaAsOnCpu) {
  if (tandem::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const tandem::Model model = model_with(std::make_shared<KernelResidual>(kWidth));
  expect_trained_alike(train(model, "cuda:0"), train(model, "cpu"));
}

// The run's error, or "" when it ran.
std::string run_error(const tandem::LayerPtr& custom, const std::string& device) {
  try {
    train(model_with(custom), device);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(CustomLayer, RawPointersOfACudaTensorNameTheLayer) {
  if (tandem::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string error = run_error(std::make_shared<LoopResidual>(kWidth), "cuda:0");
  EXPECT_NE(error.find("layer 1 (loop_residual(16)) forward: Tensor::data<f32>: "),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("cuda:0 is not on the cpu"), std::string::npos) << error;
}

// A layer that reads its input through data<T>() of the wrong type: the cpu's side of the
// access check a cuda tensor fails (Tensor::data<T> refuses both).
class WrongAccess final : public tandem::Layer {
 public:
  std::string kind() const override { return "wrong_access"; }
  std::string describe() const override { return "wrong_access"; }
  tandem::Shape output_shape(const tandem::Shape& in) const override { return in; }
  tandem::ForwardResult forward(const tandem::LayerContext& ctx, tandem::ParamView,
                                const tandem::Tensor& x) const override {
    static_cast<void>(x.data<std::int32_t>());
    return {ctx.k().zeros(x.shape()), {}};
  }
  tandem::Tensor backward_input(const tandem::LayerContext&, tandem::ParamView, tandem::Saved&,
                                const tandem::Tensor& dy) const override {
    return dy;
  }
};

TEST(CustomLayer, AFailedTensorAccessNamesTheLayer) {
  const std::string error = run_error(std::make_shared<WrongAccess>(), "cpu");
  EXPECT_NE(error.find("layer 1 (wrong_access) forward: Tensor::data<i32>: dtype mismatch"),
            std::string::npos)
      << error;
}

// Returns its output on another device than the stage's, as a layer that allocates with
// Tensor::empty instead of its kernels does on a cuda stage.
class ElsewhereOutput final : public tandem::Layer {
 public:
  std::string kind() const override { return "elsewhere"; }
  std::string describe() const override { return "elsewhere"; }
  tandem::Shape output_shape(const tandem::Shape& in) const override { return in; }
  tandem::ForwardResult forward(const tandem::LayerContext&, tandem::ParamView,
                                const tandem::Tensor& x) const override {
    return {tandem::Tensor::empty(x.shape(), tandem::DType::f32, tandem::Device::sim()), {}};
  }
  tandem::Tensor backward_input(const tandem::LayerContext&, tandem::ParamView, tandem::Saved&,
                                const tandem::Tensor& dy) const override {
    return dy;
  }
};

TEST(CustomLayer, AnOutputOnAnotherDeviceNamesTheLayer) {
  const std::string error = run_error(std::make_shared<ElsewhereOutput>(), "cpu");
  EXPECT_NE(error.find("layer 1 (elsewhere) forward: y is f32[8, 16] sim, wants [8, 16] on cpu"),
            std::string::npos)
      << error;
}

TEST(CustomLayer, TheModelHandsBackTheApplicationsLayer) {
  const auto custom = std::make_shared<KernelResidual>(kWidth);
  const tandem::Model model = model_with(custom);
  EXPECT_EQ(&model.layer(1), custom.get());
  EXPECT_EQ(model.layer(0).kind(), "linear");
  EXPECT_EQ(model.layer(0).param_numel(), kFeatures * kWidth + kWidth);
  EXPECT_THROW(model.layer(3), std::out_of_range);
}

// A built-in layer called directly runs on the context's kernels: linear(x) = x W^T + b.
TEST(CustomLayer, ABuiltInLayerRunsOnTheCpuKernels) {
  const tandem::LayerPtr linear = tandem::layers::linear(kWidth, 3);
  const tandem::Tensor x = random_tensor({4, kWidth}, 5);
  const std::vector<tandem::Tensor> params = {random_tensor({3, kWidth}, 6), random_tensor({3}, 7)};
  const tandem::Kernels& k = tandem::Kernels::cpu();
  tandem::Tensor want = k.empty({4, 3});
  k.gemm(false, true, 1.0f, x, params[0], 0.0f, want);
  k.bias_activation(want, params[1], tandem::Activation::none, nullptr);
  const tandem::ForwardResult got = linear->forward(tandem::LayerContext{}, params, x);
  EXPECT_LE(rel_error(got.y.to_float_vector(), want.to_float_vector()), 1e-6);
}

// The message of the std::invalid_argument `call` throws, or "" when it throws none.
template <class F>
std::string refusal(F&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(CustomLayer, KernelsRefuseTensorsThatDoNotFit) {
  const tandem::Kernels& k = tandem::Kernels::cpu();
  tandem::Tensor a = k.zeros({2, 3});
  tandem::Tensor c = k.zeros({2, 2});
  EXPECT_EQ(refusal([&] { k.gemm(false, false, 1.0f, a, a, 0.0f, c); }),
            "Kernels::gemm: op(a) is [2, 3] (a f32[2, 3] cpu), op(b) is [2, 3] (b f32[2, 3] "
            "cpu): inner dimensions differ");
  EXPECT_EQ(refusal([&] { k.gemm(false, true, 1.0f, a, a, 0.0f, a); }),
            "Kernels::gemm: c is f32[2, 3] cpu, wants [2, 2] as a matrix");
  tandem::Tensor sim = tandem::Tensor::empty({2, 3}, tandem::DType::f32, tandem::Device::sim());
  EXPECT_EQ(refusal([&] { k.add(a, sim, a); }),
            "Kernels::add: b is f32[2, 3] sim, the kernels run on cpu");
  EXPECT_EQ(refusal([&] { k.add(a, c, a); }), "Kernels::add: b is f32[2, 2] cpu, wants 6 elements");
  EXPECT_EQ(
      refusal([&] { k.bias_activation(a, tandem::Tensor(), tandem::Activation::gelu, nullptr); }),
      "Kernels::bias_activation: gelu needs `pre` (the pre-activation its backward reads)");
  tandem::Tensor ids = k.empty({6}, tandem::DType::i32);
  EXPECT_EQ(refusal([&] { k.scale(ids, 0.0f); }), "Kernels::scale: x is i32[6] cpu, wants f32");
}

}  // namespace
