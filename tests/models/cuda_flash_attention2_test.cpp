// FlashAttention-2-layout causal attention (models/kernels/cuda/flash_attention2.hpp) against the
// CPU's materialised attention and against the wmma kernel (flash_attention.hpp), through both
// of its interfaces (f32 with scratch, and bf16). Outputs and scratch are poisoned with NaN
// first; errors use the norm of cuda_test_util.hpp with bf16's tolerance, as
// cuda_flash_attention_test.cpp does. The GPU tests skip with "no CUDA device" unless the backend
// is built and a GPU is present; the argument checks run wherever the backend is built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/stream.hpp"
#include "runtime/tensor.hpp"
#include "tests/runtime/require_gpu.hpp"

#if TANDEM_HAVE_CUDA
#include "models/kernels/cuda/flash_attention.hpp"
#include "models/kernels/cuda/flash_attention2.hpp"
#include "tests/models/cuda_attention_test_util.hpp"
#endif

namespace tandem::models {
namespace {

#if TANDEM_HAVE_CUDA
using namespace cuda_test;  // NOLINT(google-build-using-namespace): test helpers only

constexpr double kBf16Tolerance = 2e-2;
constexpr double kLseTolerance = 2e-2;

// One position; part of one 64-key tile; one key tile (half a 128-query tile); exactly one query
// tile; several of each with partial last ones; the benchmark's sequence length.
const std::vector<Shape4> kShapes = {{1, 1, 1},   {2, 17, 3},  {1, 64, 2},
                                     {2, 128, 4}, {2, 200, 2}, {1, 1024, 1}};

// Device scratch of `bytes`, NaN-filled.
Tensor scratch_of(std::size_t bytes) {
  return poisoned(static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float)));
}

// The values rounded to bf16 (what the bf16 interface sees).
std::vector<float> rounded_to_bf16(const std::vector<float>& v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return Tensor::from_vector(v, {n}).to(DType::bf16).to_float_vector();
}

Tensor upload_bf16(const std::vector<float>& v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return Tensor::from_vector(v, {n}).to(DType::bf16).to(Device::cuda(0));
}

Tensor poisoned_bf16(std::int64_t n) {
  return upload_bf16(std::vector<float>(static_cast<std::size_t>(n), kNaN));
}

std::vector<float> download_bf16(const Tensor& t, Stream& stream) {
  stream.synchronize();
  return t.to(Device::cpu()).to_float_vector();
}

cuda::Bf16Bits* bits(Tensor& t) {
  return static_cast<cuda::Bf16Bits*>(t.raw_data());
}
const cuda::Bf16Bits* bits(const Tensor& t) {
  return static_cast<const cuda::Bf16Bits*>(t.raw_data());
}

// The f32 interface's forward and backward on the device.
struct DeviceResult {
  std::vector<float> out, lse, dqkv;
};

DeviceResult run_f32_interface(const std::vector<float>& qkv, const std::vector<float>& dout,
                               const Shape4& s, Stream& stream) {
  const Tensor gqkv = upload(qkv);
  const Tensor gdout = upload(dout);
  Tensor gout = poisoned(s.out_size());
  Tensor glse = poisoned(s.lse_size());
  Tensor gdqkv = poisoned(s.qkv_size());
  Tensor fwd_scratch =
      scratch_of(cuda::flash_attention2_forward_scratch_bytes(s.batch, s.seq, s.heads));
  Tensor bwd_scratch =
      scratch_of(cuda::flash_attention2_backward_scratch_bytes(s.batch, s.seq, s.heads));
  cuda::flash_attention2_forward(dev(gqkv), dev(gout), dev(glse), s.batch, s.seq, s.heads, 64,
                                 fwd_scratch.raw_data(), stream.native_handle());
  cuda::flash_attention2_backward(dev(gqkv), dev(gout), dev(glse), dev(gdout), dev(gdqkv), s.batch,
                                  s.seq, s.heads, 64, bwd_scratch.raw_data(),
                                  stream.native_handle());
  return {download(gout, stream), download(glse, stream), download(gdqkv, stream)};
}

// The wmma kernels (flash_attention.hpp) on the same inputs.
DeviceResult run_wmma(const std::vector<float>& qkv, const std::vector<float>& dout,
                      const Shape4& s, Stream& stream) {
  const Tensor gqkv = upload(qkv);
  const Tensor gdout = upload(dout);
  Tensor gout = poisoned(s.out_size());
  Tensor glse = poisoned(s.lse_size());
  Tensor gdqkv = poisoned(s.qkv_size());
  Tensor scratch = scratch_of(cuda::flash_attention_scratch_bytes(s.batch, s.seq, s.heads));
  cuda::flash_attention_forward(dev(gqkv), dev(gout), dev(glse), s.batch, s.seq, s.heads, 64,
                                stream.native_handle());
  cuda::flash_attention_backward(dev(gqkv), dev(gout), dev(glse), dev(gdout), dev(gdqkv), s.batch,
                                 s.seq, s.heads, 64, scratch.raw_data(), stream.native_handle());
  return {download(gout, stream), download(glse, stream), download(gdqkv, stream)};
}
#endif  // TANDEM_HAVE_CUDA

TEST(CudaFlashAttention2, SupportsHeadSize64Only) {
#if TANDEM_HAVE_CUDA
  EXPECT_TRUE(cuda::flash_attention2_supported(64));
  EXPECT_FALSE(cuda::flash_attention2_supported(32));
  EXPECT_FALSE(cuda::flash_attention2_supported(128));
#else
  GTEST_SKIP() << "no CUDA backend";
#endif
}

// Shapes are checked before the device is touched, so this runs without a GPU.
TEST(CudaFlashAttention2, RejectsOtherHeadSizesAndOversizedGrids) {
#if TANDEM_HAVE_CUDA
  EXPECT_THROW(
      cuda::flash_attention2_forward(nullptr, nullptr, nullptr, 1, 8, 1, 32, nullptr, nullptr),
      std::invalid_argument);
  EXPECT_THROW(cuda::flash_attention2_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 1,
                                               128, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(cuda::flash_attention2_forward_bf16(nullptr, nullptr, nullptr, 1, 8, 1, 16, nullptr),
               std::invalid_argument);
  EXPECT_THROW(cuda::flash_attention2_backward_bf16(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                    70000, 8, 1, 64, nullptr, nullptr),
               std::invalid_argument);
#else
  GTEST_SKIP() << "no CUDA backend";
#endif
}

// The f32 interface's scratch holds the bf16 copies it makes, and backward's also the row sums
// and the f32 dQ.
TEST(CudaFlashAttention2, ScratchHoldsTheBf16CopiesAndTheF32Accumulators) {
#if TANDEM_HAVE_CUDA
  for (const Shape4& s : kShapes) {
    const auto n = static_cast<std::size_t>(s.out_size());
    const auto rows = static_cast<std::size_t>(s.lse_size());
    EXPECT_GE(cuda::flash_attention2_forward_scratch_bytes(s.batch, s.seq, s.heads), 2 * 4 * n)
        << s.label();
    EXPECT_GE(cuda::flash_attention2_backward_bf16_scratch_bytes(s.batch, s.seq, s.heads),
              4 * (rows + n))
        << s.label();
    EXPECT_GE(cuda::flash_attention2_backward_scratch_bytes(s.batch, s.seq, s.heads),
              2 * 5 * n + 4 * (rows + n))
        << s.label();
  }
#else
  GTEST_SKIP() << "no CUDA backend";
#endif
}

TEST(CudaFlashAttention2, F32InterfaceMatchesTheMaterialisedAttention) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const Shape4& s : kShapes) {
    const std::vector<float> qkv = random_floats(s.qkv_size(), 41, -1.0f, 1.0f);
    const std::vector<float> dout = random_floats(s.out_size(), 43);
    const Reference want = cpu_reference(qkv, dout, s);
    const DeviceResult got = run_f32_interface(qkv, dout, s, stream);
    EXPECT_LE(rel_error(got.out, want.out), kBf16Tolerance) << s.label() << " out";
    EXPECT_LE(max_abs_diff(got.lse, reference_lse(qkv, s.batch, s.seq, s.heads)), kLseTolerance)
        << s.label() << " lse";
    expect_dqkv_near(got.dqkv, want.dqkv, s, "dqkv", kBf16Tolerance);
  }
#endif
}

// The bf16 interface against the CPU on the same bf16-rounded inputs: what remains is the
// rounding of P, dS and the outputs.
TEST(CudaFlashAttention2, Bf16InterfaceMatchesTheMaterialisedAttention) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const Shape4& s : kShapes) {
    const std::vector<float> qkv = rounded_to_bf16(random_floats(s.qkv_size(), 51, -1.0f, 1.0f));
    const std::vector<float> dout = rounded_to_bf16(random_floats(s.out_size(), 53));
    const Reference want = cpu_reference(qkv, dout, s);
    const Tensor gqkv = upload_bf16(qkv);
    const Tensor gdout = upload_bf16(dout);
    Tensor gout = poisoned_bf16(s.out_size());
    Tensor glse = poisoned(s.lse_size());
    Tensor gdqkv = poisoned_bf16(s.qkv_size());
    Tensor scratch =
        scratch_of(cuda::flash_attention2_backward_bf16_scratch_bytes(s.batch, s.seq, s.heads));
    cuda::flash_attention2_forward_bf16(bits(gqkv), bits(gout), dev(glse), s.batch, s.seq, s.heads,
                                        64, stream.native_handle());
    cuda::flash_attention2_backward_bf16(bits(gqkv), bits(gout), dev(glse), bits(gdout),
                                         bits(gdqkv), s.batch, s.seq, s.heads, 64,
                                         scratch.raw_data(), stream.native_handle());
    EXPECT_LE(rel_error(download_bf16(gout, stream), want.out), kBf16Tolerance)
        << s.label() << " out";
    EXPECT_LE(max_abs_diff(download(glse, stream), reference_lse(qkv, s.batch, s.seq, s.heads)),
              kLseTolerance)
        << s.label() << " lse";
    expect_dqkv_near(download_bf16(gdqkv, stream), want.dqkv, s, "dqkv", kBf16Tolerance);
  }
#endif
}

// Both kernels round the same operands to bf16: they should agree at least as well as each
// agrees with the CPU.
TEST(CudaFlashAttention2, MatchesTheWmmaKernel) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const Shape4& s : kShapes) {
    const std::vector<float> qkv = random_floats(s.qkv_size(), 61, -1.0f, 1.0f);
    const std::vector<float> dout = random_floats(s.out_size(), 63);
    const DeviceResult want = run_wmma(qkv, dout, s, stream);
    const DeviceResult got = run_f32_interface(qkv, dout, s, stream);
    EXPECT_LE(rel_error(got.out, want.out), kBf16Tolerance) << s.label() << " out";
    EXPECT_LE(max_abs_diff(got.lse, want.lse), kLseTolerance) << s.label() << " lse";
    expect_dqkv_near(got.dqkv, want.dqkv, s, "dqkv against wmma", kBf16Tolerance);
  }
#endif
}

}  // namespace
}  // namespace tandem::models
