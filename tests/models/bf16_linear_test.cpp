// Linear layers on cpu executors at MatmulPrecision::bf16: operands rounded to bf16 (the weights
// once per version, through the kernels' cache), f32 accumulation and f32 outputs and
// gradients. Results are within bf16's rounding of f32 but not equal to them; the weights'
// bf16 copies follow the optimizers' copy-on-write versions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "grad_check.hpp"
#include "models/executor.hpp"
#include "models/kernels/cpu/bf16_gemm.hpp"
#include "models/kernels/cpu/bf16_weight_cache.hpp"
#include "models/kernels/kernels.hpp"
#include "models/layers/linear.hpp"
#include "models/layers/transformer_block.hpp"
#include "models/loss.hpp"
#include "models/model.hpp"
#include "models/model_spec.hpp"
#include "models/optimizer.hpp"

namespace tandem::models::testing {
namespace {

// ||got - want||_2 / ||want||_2.
double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.to_float_vector(), w = want.to_float_vector();
  EXPECT_EQ(g.size(), w.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < g.size() && i < w.size(); ++i) {
    diff += (static_cast<double>(g[i]) - w[i]) * (static_cast<double>(g[i]) - w[i]);
    norm += static_cast<double>(w[i]) * w[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// bf16 keeps 8 significant bits: each product moves by up to 2^-8 of itself, and sums of
// products of mixed signs by that much of their magnitudes. Well above what the tests see
// (about 2^-9), well below any real error.
constexpr double kBf16Tolerance = 1.0 / 64;

struct Pass {
  Tensor y, dx, dw, db;
};

Pass run_linear(const Linear& layer, const Context& ctx, const std::vector<Tensor>& params,
                const Tensor& x, const Tensor& dy) {
  ForwardResult f = layer.forward(ctx, params, x);
  std::vector<Tensor> grads = {Tensor::zeros(params[0].shape()), Tensor::zeros(params[1].shape())};
  const Tensor dx = layer.backward_into(ctx, params, f.saved, dy, true, GradSink{grads});
  return {f.y, dx, grads[0], grads[1]};
}

TEST(Bf16Linear, ForwardAndBackwardWithinBf16OfF32) {
  if (!cpu::bf16_gemm_native()) GTEST_SKIP() << "no AVX512-BF16 or AMX on this CPU";
  const std::unique_ptr<Kernels> k16 = make_cpu_kernels(true);
  ASSERT_TRUE(k16->bf16_products());
  Context c16;
  c16.kernels = k16.get();
  for (const cpu::Activation act : {cpu::Activation::none, cpu::Activation::gelu}) {
    // Odd sizes, and one large enough for the products to be split across workers.
    for (const auto& [rows, in, out] :
         {std::tuple<std::int64_t, std::int64_t, std::int64_t>{33, 97, 41}, {130, 256, 192}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out));
      const Linear layer(in, out, act);
      const std::vector<Tensor> p = random_params(layer, 1);
      const Tensor x = random_tensor({rows, in}, 2);
      const Tensor dy = random_tensor({rows, out}, 3);
      const Pass f32 = run_linear(layer, Context{}, p, x, dy);
      const Pass b16 = run_linear(layer, c16, p, x, dy);
      // What the bf16 layer reads of its output gradient: dy rounded to bf16.
      Tensor dy16 = dy.clone();
      for (float& v : std::span<float>(dy16.data<float>(), static_cast<std::size_t>(dy16.numel())))
        v = BFloat16::from_float(v).to_float();
      const Pass rounded = run_linear(layer, Context{}, p, x, dy16);
      for (const auto& [name, got, want] :
           {std::tuple<const char*, const Tensor&, const Tensor&>{"y", b16.y, f32.y},
            {"dx", b16.dx, f32.dx},
            {"dW", b16.dw, f32.dw},
            {"db", b16.db, f32.db}}) {
        EXPECT_EQ(got.dtype(), DType::f32) << name;
        const double e = relative_error(got, want);
        EXPECT_LE(e, kBf16Tolerance) << name;
        // The bias gradient is an f32 sum, no product, of the rounded gradient: equal to the
        // f32 layer's on the rounded dy. The rest are rounded products.
        if (std::string(name) == "db" && act == cpu::Activation::none) {
          EXPECT_EQ(got.to_float_vector(), rounded.db.to_float_vector()) << name;
        } else if (std::string(name) != "db") {
          EXPECT_GT(e, 0.0) << name << " equals f32: the bf16 path did not run";
        }
      }
      // B then W separately gives the fused result bit for bit.
      ForwardResult f = layer.forward(c16, p, x);
      const Tensor dx = layer.backward_input(c16, p, f.saved, dy);
      std::vector<Tensor> grads = {Tensor::zeros(p[0].shape()), Tensor::zeros(p[1].shape())};
      layer.backward_weight_into(c16, f.saved, dy, GradSink{grads});
      EXPECT_EQ(dx.to_float_vector(), b16.dx.to_float_vector());
      EXPECT_EQ(grads[0].to_float_vector(), b16.dw.to_float_vector());
    }
  }
}

// The transformer block's four linear maps take the same bf16 path (detail::linear_map_*); its
// layer norms, attention core and residual adds stay f32.
TEST(Bf16TransformerBlock, ForwardAndBackwardWithinBf16OfF32) {
  if (!cpu::bf16_gemm_native()) GTEST_SKIP() << "no AVX512-BF16 or AMX on this CPU";
  const std::unique_ptr<Kernels> k16 = make_cpu_kernels(true);
  Context c16;
  c16.kernels = k16.get();
  const TransformerBlock block(32, 4, 64, 0.0f, 1, 2);
  const std::vector<Tensor> p = random_params(block, 1);
  const Tensor x = random_tensor({3, 7, 32}, 2);
  const Tensor dy = random_tensor({3, 7, 32}, 3);
  auto pass = [&](const Context& ctx) {
    Saved saved = block.forward(ctx, p, x).saved;
    const Tensor y = block.forward(ctx, p, x).y;
    BackwardResult r = block.backward(ctx, p, saved, dy);
    r.grads.insert(r.grads.begin(), {y, r.dx});
    return r.grads;
  };
  const std::vector<Tensor> f32 = pass(Context{});
  const std::vector<Tensor> b16 = pass(c16);
  ASSERT_EQ(f32.size(), b16.size());
  double largest = 0;
  for (std::size_t i = 0; i < f32.size(); ++i) {
    const double e = relative_error(b16[i], f32[i]);
    EXPECT_LE(e, kBf16Tolerance) << "output " << i;
    largest = std::max(largest, e);
  }
  EXPECT_GT(largest, 0.0) << "equals f32: the bf16 path did not run";
  // Within bf16 of f32, but the same on every run: a bf16 product is deterministic.
  const std::vector<Tensor> again = pass(c16);
  for (std::size_t i = 0; i < b16.size(); ++i)
    EXPECT_EQ(again[i].to_float_vector(), b16[i].to_float_vector()) << "output " << i;
}

TEST(Bf16WeightCache, OneCopyPerVersionKeptWhileTheVersionLives) {
  cpu::Bf16WeightCache cache;
  Tensor w = random_tensor({5, 7}, 4);
  const Tensor c1 = cache.get(w);
  EXPECT_EQ(c1.dtype(), DType::bf16);
  EXPECT_EQ(c1.shape(), w.shape());
  for (std::int64_t i = 0; i < w.numel(); ++i)
    EXPECT_EQ(c1.data<BFloat16>()[i], BFloat16::from_float(w.data<float>()[i])) << i;
  EXPECT_TRUE(cache.get(w).shares_storage(c1)) << "a second copy of the same version";
  // The cache's handle keeps in-place writers (optimizers' copy-on-write) off the weight.
  EXPECT_FALSE(w.storage_unique());
  // A new version (as an optimizer's copy-on-write update makes) gets a copy of its own; the
  // old one goes once nothing but the cache holds it.
  Tensor w2 = w.clone();
  w2.data<float>()[0] += 1.0f;
  w = w2;
  const Tensor c2 = cache.get(w);
  EXPECT_FALSE(c2.shares_storage(c1));
  EXPECT_EQ(c2.data<BFloat16>()[0], BFloat16::from_float(w.data<float>()[0]));
  EXPECT_EQ(cache.size(), 1u);
  // A version written in place after all is dropped by its writer and copied afresh.
  cache.drop(w);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_THROW(cache.get(Tensor::zeros({2, 2}, DType::bf16)), std::invalid_argument);
}

TEST(Bf16WeightCache, FollowsAnOptimizersUpdates) {
  if (!cpu::bf16_gemm_native()) GTEST_SKIP() << "no AVX512-BF16 or AMX on this CPU";
  const std::unique_ptr<Kernels> k16 = make_cpu_kernels(true);
  ParamSet p;
  p.add("w", random_tensor({8, 16}, 5));
  ParamSet g;
  g.add("w", random_tensor({8, 16}, 6));
  const Tensor before = k16->bf16_copy(p[0]);
  auto opt = make_optimizer(OptimizerSpec{.kind = "sgd", .lr = 0.5});
  opt->step(p, g);
  // The copy held the old version, so the update went to a new tensor: the old copy still
  // matches the old values, and the new version gets a copy of the new ones.
  const Tensor after = k16->bf16_copy(p[0]);
  EXPECT_FALSE(after.shares_storage(before));
  for (std::int64_t i = 0; i < p[0].numel(); ++i)
    ASSERT_EQ(after.data<BFloat16>()[i], BFloat16::from_float(p[0].data<float>()[i])) << i;
}

struct StepResult {
  double loss = 0;
  ParamSet params;
};

// Two SGD steps of an MLP on an executor of that precision.
StepResult train_two_steps(MatmulPrecision precision, bool expect_bf16) {
  const Model m = Model::build(mlp_spec({64, 96, 80, 10}));
  StepResult r{0, m.init_params(3)};
  const std::int64_t batch = 24;
  const Tensor x = random_tensor(m.input_shape(batch), 7);
  Tensor targets = Tensor::empty(m.target_shape(batch), DType::i32);
  for (std::int64_t i = 0; i < targets.numel(); ++i) targets.data<std::int32_t>()[i] = i % 10;
  auto opt = make_optimizer(OptimizerSpec{.kind = "sgd", .lr = 0.1});
  const std::unique_ptr<Executor> ex = make_executor(Device::cpu(), {}, 0, precision);
  for (int step = 0; step < 2; ++step) {
    ex->run(Context{true, 11, 0}, [&](const Context& ctx) {
      EXPECT_EQ(ctx.k().bf16_products(), expect_bf16);
      auto fwd = m.forward(ctx, r.params, x, 0, m.num_layers());
      const LossResult l = softmax_cross_entropy(fwd.y, targets, true, 1.0f / batch);
      r.loss = l.loss_sum / batch;
      ParamSet grads = r.params.zeros_like();
      m.backward(ctx, r.params, fwd.saved, l.dlogits, 0, m.num_layers(), false, grads);
      ex->step(ctx, *opt, r.params, grads);
    });
  }
  return r;
}

TEST(Bf16Linear, ModelStepDiffersFromF32ByABf16SizedAmount) {
  const bool native = cpu::bf16_gemm_native();
  const StepResult f32 = train_two_steps(MatmulPrecision::f32, false);
  const StepResult b16 = train_two_steps(MatmulPrecision::bf16, native);
  if (!native) {
    // The executor fell back to f32 (and said so once).
    EXPECT_EQ(b16.loss, f32.loss);
    GTEST_SKIP() << "no AVX512-BF16 or AMX on this CPU: checked the f32 fallback only";
  }
  EXPECT_NE(b16.loss, f32.loss);
  EXPECT_NEAR(b16.loss, f32.loss, kBf16Tolerance * std::abs(f32.loss));
  // What two steps changed, against f32's change. Beyond each product's rounding (2^-9), a
  // pre-activation that bf16 moves across zero flips its ReLU, which changes that sample's whole
  // contribution to the earlier layers' gradients: about 5% of the first layer's update after one
  // step here, 3% after two.
  const ParamSet init = Model::build(mlp_spec({64, 96, 80, 10})).init_params(3);
  for (std::int64_t i = 0; i < f32.params.size(); ++i) {
    const std::vector<float> p0 = init[i].to_float_vector(), a = b16.params[i].to_float_vector(),
                             b = f32.params[i].to_float_vector();
    double diff = 0, change = 0;
    for (std::size_t j = 0; j < b.size(); ++j) {
      diff += (static_cast<double>(a[j]) - b[j]) * (static_cast<double>(a[j]) - b[j]);
      change += (static_cast<double>(b[j]) - p0[j]) * (static_cast<double>(b[j]) - p0[j]);
    }
    const double e = std::sqrt(diff / std::max(change, 1e-30));
    EXPECT_LE(e, 4 * kBf16Tolerance) << f32.params.name(i) << ": bf16's update against f32's";
    EXPECT_GT(e, 0.0) << f32.params.name(i) << " equals f32";
  }
}

}  // namespace
}  // namespace tandem::models::testing
