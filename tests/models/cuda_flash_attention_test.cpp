// Fused causal attention on the GPU (models/kernels/cuda/flash_attention.hpp) against the CPU's
// materialised attention, and the layers that choose it (bf16 precision, head size 64) against
// the same layers on the CPU. Outputs are poisoned with NaN first; errors use the norm of
// cuda_test_util.hpp, with bf16's tolerance (its operands keep 8 bits of mantissa). Every test
// skips with "no CUDA device" unless the backend is built and a GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/stream.hpp"
#include "runtime/tensor.hpp"
#include "tests/runtime/require_gpu.hpp"

#if TANDEM_HAVE_CUDA
#include "models/kernels/cpu/attention.hpp"
#include "models/kernels/cuda/cuda_kernels.hpp"
#include "models/kernels/cuda/flash_attention.hpp"
#include "models/layer.hpp"
#include "models/layers/attention.hpp"
#include "models/layers/transformer_block.hpp"
#include "tests/models/cuda_attention_test_util.hpp"
#endif

namespace tandem::models {
namespace {

#if TANDEM_HAVE_CUDA
using namespace cuda_test;  // NOLINT(google-build-using-namespace): test helpers only

constexpr double kBf16Tolerance = 2e-2;
// A whole layer chains several bf16 products (and layer norm's backward through them).
constexpr double kLayerTolerance = 4e-2;

// One position; a partial tile; exactly one tile; several tiles with a partial last one; the
// benchmark's sequence length.
const std::vector<Shape4> kShapes = {{1, 1, 1}, {2, 37, 3}, {1, 64, 2}, {2, 200, 2}, {1, 1024, 1}};

#endif  // TANDEM_HAVE_CUDA

TEST(CudaFlashAttention, SupportsHeadSize64Only) {
#if TANDEM_HAVE_CUDA
  EXPECT_TRUE(cuda::flash_attention_supported(64));
  EXPECT_FALSE(cuda::flash_attention_supported(32));
  EXPECT_FALSE(cuda::flash_attention_supported(128));
#else
  GTEST_SKIP() << "no CUDA backend";
#endif
}

TEST(CudaFlashAttention, ForwardMatchesTheMaterialisedAttention) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const Shape4& s : kShapes) {
    const std::vector<float> qkv = random_floats(s.qkv_size(), 41, -1.0f, 1.0f);
    std::vector<float> want(static_cast<std::size_t>(s.out_size()));
    std::vector<float> probs(static_cast<std::size_t>(s.batch * s.heads * s.seq * s.seq));
    cpu::causal_attention_forward(qkv.data(), want.data(), probs.data(), s.batch, s.seq, s.heads,
                                  64);
    const Tensor gqkv = upload(qkv);
    Tensor gout = poisoned(s.out_size());
    Tensor glse = poisoned(s.batch * s.heads * s.seq);
    cuda::flash_attention_forward(dev(gqkv), dev(gout), dev(glse), s.batch, s.seq, s.heads, 64,
                                  stream.native_handle());
    EXPECT_LE(rel_error(download(gout, stream), want), kBf16Tolerance) << s.label() << " out";
    EXPECT_LE(max_abs_diff(download(glse, stream), reference_lse(qkv, s.batch, s.seq, s.heads)),
              2e-2)
        << s.label() << " lse";
  }
#endif
}

TEST(CudaFlashAttention, BackwardMatchesTheMaterialisedAttention) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const Shape4& s : kShapes) {
    const std::vector<float> qkv = random_floats(s.qkv_size(), 42, -1.0f, 1.0f);
    const std::vector<float> dout = random_floats(s.out_size(), 43);
    const std::vector<float> want = cpu_reference(qkv, dout, s).dqkv;
    const Tensor gqkv = upload(qkv);
    const Tensor gdout = upload(dout);
    Tensor gout = poisoned(s.out_size());
    Tensor glse = poisoned(s.batch * s.heads * s.seq);
    cuda::flash_attention_forward(dev(gqkv), dev(gout), dev(glse), s.batch, s.seq, s.heads, 64,
                                  stream.native_handle());
    Tensor gdqkv = poisoned(s.qkv_size());
    Tensor scratch = poisoned(static_cast<std::int64_t>(
        cuda::flash_attention_scratch_bytes(s.batch, s.seq, s.heads) / sizeof(float)));
    cuda::flash_attention_backward(dev(gqkv), dev(gout), dev(glse), dev(gdout), dev(gdqkv), s.batch,
                                   s.seq, s.heads, 64, scratch.raw_data(), stream.native_handle());
    expect_dqkv_near(download(gdqkv, stream), want, s, "dqkv", kBf16Tolerance);
  }
#endif
}

#if TANDEM_HAVE_CUDA
// A copy of `t` on cuda:0.
Tensor on_gpu(const Tensor& t) {
  Tensor g = Tensor::empty(t.shape(), t.dtype(), Device::cuda(0));
  g.copy_from(t);
  return g;
}

std::vector<float> to_host(const Tensor& t, Stream& stream) {
  stream.synchronize();
  return t.to_float_vector();
}

// The layer on the CPU and on cuda:0 at bf16, which takes fused attention for head size 64
// unless TANDEM_FUSED_ATTENTION=0 (`fused` false): output, input gradient and every weight
// gradient within the tolerance, and the GPU's forward kept the log-sum-exp ([b, heads, t]) or
// the probabilities ([b, heads, t, t]) accordingly.
void expect_layer_matches(const Layer& layer, std::int64_t batch, std::int64_t seq,
                          std::int64_t d_model, std::size_t probs_at, bool fused) {
  const std::string who = layer.describe();
  std::vector<Tensor> params, gparams;
  std::uint32_t seed = 50;
  for (const ParamSpec& p : layer.param_specs()) {
    std::int64_t n = 1;
    for (std::int64_t x : p.shape) n *= x;
    Tensor t = Tensor::from_vector(random_floats(n, seed++, -0.1f, 0.1f), p.shape);
    params.push_back(t);
    gparams.push_back(on_gpu(t));
  }
  const Shape shape{batch, seq, d_model};
  const Tensor x = Tensor::from_vector(random_floats(batch * seq * d_model, 60), shape);
  const Tensor dy = Tensor::from_vector(random_floats(batch * seq * d_model, 61), shape);

  Context cpu_ctx;
  ForwardResult want = layer.forward(cpu_ctx, params, x);
  const Tensor want_dx = layer.backward_input(cpu_ctx, params, want.saved, dy);
  std::vector<Tensor> want_grads;
  for (const Tensor& p : params) want_grads.push_back(Tensor::zeros(p.shape()));
  layer.backward_weight_into(cpu_ctx, want.saved, dy, {want_grads, 1.0f, 0.0f});

  Stream stream(Device::cuda(0));
  if (!fused) ::setenv("TANDEM_FUSED_ATTENTION", "0", 1);
  const CudaKernels kernels(stream, cuda::GemmPrecision::bf16);
  ::unsetenv("TANDEM_FUSED_ATTENTION");
  ASSERT_EQ(kernels.fused_attention(64), fused);
  Context ctx;
  ctx.kernels = &kernels;
  const Tensor gx = on_gpu(x);
  const Tensor gdy = on_gpu(dy);
  ForwardResult got = layer.forward(ctx, gparams, gx);
  ASSERT_GT(got.saved.size(), probs_at);
  const Shape kept = fused ? Shape{batch, d_model / 64, seq} : Shape{batch, d_model / 64, seq, seq};
  EXPECT_EQ(got.saved[probs_at].shape(), kept) << who;
  const Tensor gdx = layer.backward_input(ctx, gparams, got.saved, gdy);
  std::vector<Tensor> grads;
  for (const Tensor& p : gparams) {
    grads.push_back(Tensor::full(p.shape(), NAN, DType::f32, Device::cuda(0)));
  }
  layer.backward_weight_into(ctx, got.saved, gdy, {grads, 1.0f, 0.0f});
  EXPECT_LE(rel_error(to_host(got.y, stream), want.y.to_float_vector()), kLayerTolerance)
      << who << " output";
  EXPECT_LE(rel_error(to_host(gdx, stream), want_dx.to_float_vector()), kLayerTolerance)
      << who << " input gradient";
  for (std::size_t i = 0; i < grads.size(); ++i) {
    EXPECT_LE(rel_error(to_host(grads[i], stream), want_grads[i].to_float_vector()),
              kLayerTolerance)
        << who << " gradient of " << layer.param_specs()[i].name;
  }
}
#endif  // TANDEM_HAVE_CUDA

TEST(CudaFlashAttention, LayersTakeItAtBf16AndMatchTheCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  // Materialised first: the tolerance holds for bf16 without the fused kernels too.
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "materialised");
    expect_layer_matches(CausalSelfAttention(128, 2, 1.0f), 2, 100, 128, 2, fused);
    expect_layer_matches(TransformerBlock(128, 2, 512, 0.0f, 7, 2), 2, 100, 128, 4, fused);
  }
#endif
}

}  // namespace
}  // namespace tandem::models
