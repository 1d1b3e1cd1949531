// The cuBLASLt epilogue GEMMs (models/kernels/cuda/gemm_epilogue.hpp) against the CPU kernels'
// gemm followed by bias_act_forward, act_backward_bias and column_sum, at each precision with
// cuda_gemm_test.cpp's tolerances. Built in every configuration. The argument checks run
// wherever the CUDA backend is built (they throw before any CUDA call); the numerical tests
// skip with "no CUDA device" unless a GPU is present. Outputs are poisoned with NaN, so an
// element left unwritten fails (cuda_test_util.hpp).
//
// The bf16 flavours read bf16 operands; their CPU reference starts from the same values rounded
// to bf16, so the comparison measures the product's f32 accumulation and the rounding of its
// outputs, not the rounding of its inputs.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device.hpp"
#include "tests/runtime/require_gpu.hpp"

#if TANDEM_HAVE_CUDA
#include <fmt/format.h>

#include "models/kernels/cpu/activation.hpp"
#include "models/kernels/cpu/gemm.hpp"
#include "models/kernels/cpu/reduce.hpp"
#include "models/kernels/cuda/gemm_epilogue.hpp"
#include "tests/models/cuda_test_util.hpp"
#endif

namespace tandem::models {
namespace {

#if TANDEM_HAVE_CUDA
using namespace cuda_test;  // NOLINT(google-build-using-namespace): test helpers only
using cuda::GemmPrecision;
using cuda::LinearDims;

// cuda_gemm_test.cpp's tolerances: f32 differs from the CPU only in summation order; TF32
// keeps 10 mantissa bits of each input; bf16 rounds the outputs to 8 bits.
double tolerance(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::f32:
      return 1e-5;
    case GemmPrecision::tf32:
      return 3e-3;
    case GemmPrecision::bf16:
      return 2e-2;
  }
  return 0;
}

const std::vector<GemmPrecision> kPrecisions = {GemmPrecision::f32, GemmPrecision::tf32,
                                                GemmPrecision::bf16};

// Every size of {1, 7, 64, 129, 1024} in every position, none of 1024^3 (the CPU reference
// would dominate the run).
const std::vector<LinearDims> kShapes = {{1, 1, 1},         {7, 129, 1},   {64, 1, 129},
                                         {129, 7, 1024},    {1024, 64, 7}, {1, 1024, 64},
                                         {1024, 129, 1024}, {7, 7, 7}};
// The GELU epilogues keep [rows, features] with features a multiple of 8 (out forward, in
// backward); rows and the other size stay odd.
const std::vector<LinearDims> kGeluForwardShapes = {
    {1, 1, 64}, {7, 129, 64}, {129, 7, 1024}, {1024, 1024, 64}, {64, 1, 1024}};
const std::vector<LinearDims> kGeluBackwardShapes = {
    {1, 64, 1}, {7, 64, 129}, {129, 1024, 7}, {1024, 64, 1024}, {64, 1024, 1}};

std::string label(const char* what, LinearDims d, GemmPrecision p, const std::string& extra) {
  return fmt::format("{} {} rows={} in={} out={} {}", what, cuda::gemm_precision_name(p), d.rows,
                     d.in, d.out, extra);
}

std::vector<float> bf16_rounded(std::vector<float> v) {
  for (float& x : v) x = BFloat16::from_float(x).to_float();
  return v;
}

// Inputs as the call at `p` sees them: bf16 calls get bf16-rounded values, so the CPU reference
// is computed from the same numbers.
std::vector<float> inputs(std::int64_t n, std::uint32_t seed, GemmPrecision p) {
  std::vector<float> v = random_floats(n, seed);
  return p == GemmPrecision::bf16 ? bf16_rounded(std::move(v)) : v;
}

// A cuda:0 tensor of `values` in the dtype the call at `p` takes.
Tensor upload_as(const std::vector<float>& values, GemmPrecision p) {
  Tensor t = upload(values);
  return p == GemmPrecision::bf16 ? t.to(DType::bf16) : t;
}

Tensor poisoned_as(std::int64_t n, GemmPrecision p) {
  Tensor t = poisoned(n);
  return p == GemmPrecision::bf16 ? t.to(DType::bf16) : t;
}

const BFloat16* bf(const Tensor& t) {
  return static_cast<const BFloat16*>(t.raw_data());
}
BFloat16* bf(Tensor& t) {
  return static_cast<BFloat16*>(t.raw_data());
}

std::vector<float> sizes(std::int64_t n) {
  return std::vector<float>(static_cast<std::size_t>(n));
}

// --- forward: y = act(x W^T + b) ---

struct ForwardCase {
  LinearDims d;
  cpu::Activation act;
  bool bias;
  GemmPrecision p;
};

struct ForwardData {
  Tensor x, w, b, y, pre;
};

// Device inputs from seed, poisoned outputs; want_y and want_pre from the CPU kernels.
ForwardData forward_data(const ForwardCase& c, std::uint32_t seed, std::vector<float>& want_y,
                         std::vector<float>& want_pre) {
  const LinearDims d = c.d;
  const std::vector<float> x = inputs(d.rows * d.in, seed, c.p);
  const std::vector<float> w = inputs(d.out * d.in, seed + 1, c.p);
  const std::vector<float> b = inputs(d.out, seed + 2, c.p);
  want_y = sizes(d.rows * d.out);
  want_pre = sizes(d.rows * d.out);
  cpu::gemm(false, true, d.rows, d.out, d.in, 1.0f, x.data(), d.in, w.data(), d.in, 0.0f,
            want_y.data(), d.out);
  cpu::bias_act_forward(want_y.data(), c.bias ? b.data() : nullptr, d.rows, d.out, c.act,
                        want_pre.data());
  ForwardData g;
  g.x = upload_as(x, c.p);
  g.w = upload_as(w, c.p);
  g.b = upload_as(b, c.p);
  g.y = poisoned_as(d.rows * d.out, c.p);
  g.pre = poisoned_as(d.rows * d.out, c.p);
  return g;
}

void forward(const ForwardCase& c, ForwardData& g, std::int64_t offset, Stream& stream) {
  const bool gelu = c.act == cpu::Activation::gelu;
  if (c.p == GemmPrecision::bf16) {
    cuda::linear_forward_epilogue(
        bf(g.x) + offset, bf(g.w) + offset, c.bias ? bf(g.b) + offset : nullptr, bf(g.y) + offset,
        gelu ? bf(g.pre) + offset : nullptr, c.d, c.act, stream.native_handle());
  } else {
    cuda::linear_forward_epilogue(dev(g.x) + offset, dev(g.w) + offset,
                                  c.bias ? dev(g.b) + offset : nullptr, dev(g.y) + offset,
                                  gelu ? dev(g.pre) + offset : nullptr, c.d, c.act, c.p,
                                  stream.native_handle());
  }
}

void expect_forward(const ForwardCase& c, ForwardData& g, const std::vector<float>& want_y,
                    const std::vector<float>& want_pre, Stream& stream, const std::string& what) {
  EXPECT_LE(rel_error(download(g.y, stream), want_y), tolerance(c.p)) << what << " y";
  if (c.act == cpu::Activation::gelu) {
    EXPECT_LE(rel_error(download(g.pre, stream), want_pre), tolerance(c.p)) << what << " pre";
  }
}

void check_forward(const ForwardCase& c, Stream& stream) {
  const std::string what = label(
      "forward", c.d, c.p, fmt::format("act={} bias={}", cpu::activation_name(c.act), c.bias));
  std::vector<float> want_y;
  std::vector<float> want_pre;
  ForwardData g = forward_data(c, 41, want_y, want_pre);
  forward(c, g, 0, stream);
  expect_forward(c, g, want_y, want_pre, stream, what);
}

// --- backward input with GELU: dz = (dy W) * gelu'(pre), db = column sums of dz ---

void check_dgelu(LinearDims d, bool with_db, GemmPrecision p, Stream& stream) {
  const std::string what = label("dgelu", d, p, fmt::format("db={}", with_db));
  const std::vector<float> dy = inputs(d.rows * d.out, 51, p);
  const std::vector<float> w = inputs(d.out * d.in, 52, p);
  const std::vector<float> pre = inputs(d.rows * d.in, 53, p);
  std::vector<float> want_dz = sizes(d.rows * d.in);
  std::vector<float> want_db = sizes(d.in);
  cpu::gemm(false, false, d.rows, d.in, d.out, 1.0f, dy.data(), d.out, w.data(), d.in, 0.0f,
            want_dz.data(), d.in);
  cpu::act_backward_bias(want_dz.data(), pre.data(), want_dz.data(), d.rows, d.in,
                         cpu::Activation::gelu, want_db.data(), 1.0f, 0.0f);
  const Tensor gdy = upload_as(dy, p);
  const Tensor gw = upload_as(w, p);
  const Tensor gpre = upload_as(pre, p);
  Tensor gdz = poisoned_as(d.rows * d.in, p);
  Tensor gdb = poisoned_as(d.in, p);
  if (p == GemmPrecision::bf16) {
    cuda::linear_backward_input_dgelu(bf(gdy), bf(gw), bf(gpre), bf(gdz),
                                      with_db ? bf(gdb) : nullptr, d, stream.native_handle());
  } else {
    cuda::linear_backward_input_dgelu(dev(gdy), dev(gw), dev(gpre), dev(gdz),
                                      with_db ? dev(gdb) : nullptr, d, p, stream.native_handle());
  }
  EXPECT_LE(rel_error(download(gdz, stream), want_dz), tolerance(p)) << what << " dz";
  if (with_db) {
    EXPECT_LE(rel_error(download(gdb, stream), want_db), tolerance(p)) << what << " db";
  }
}

// --- weight gradient with the bias gradient: dW = dz^T x + beta dW, db = column sums of dz ---

void check_bgrad(LinearDims d, float beta, bool with_db, GemmPrecision p, Stream& stream) {
  const std::string what = label("bgrad", d, p, fmt::format("beta={} db={}", beta, with_db));
  const std::vector<float> dz = inputs(d.rows * d.out, 61, p);
  const std::vector<float> x = inputs(d.rows * d.in, 62, p);
  const std::vector<float> dw0 = random_floats(d.out * d.in, 63);
  std::vector<float> want_dw = dw0;
  std::vector<float> want_db = sizes(d.out);
  cpu::gemm(true, false, d.out, d.in, d.rows, 1.0f, dz.data(), d.out, x.data(), d.in, beta,
            want_dw.data(), d.in);
  cpu::column_sum(dz.data(), d.rows, d.out, 1.0f, 0.0f, want_db.data());
  const Tensor gdz = upload_as(dz, p);
  const Tensor gx = upload_as(x, p);
  // dW and db are f32 in both flavours.
  Tensor gdw = beta == 0.0f ? poisoned(d.out * d.in) : upload(dw0);
  Tensor gdb = poisoned(d.out);
  float* db = with_db ? dev(gdb) : nullptr;
  if (p == GemmPrecision::bf16) {
    cuda::linear_backward_weight_bgrad(bf(gdz), bf(gx), dev(gdw), db, beta, d,
                                       stream.native_handle());
  } else {
    cuda::linear_backward_weight_bgrad(dev(gdz), dev(gx), dev(gdw), db, beta, d, p,
                                       stream.native_handle());
  }
  EXPECT_LE(rel_error(download(gdw, stream), want_dw), tolerance(p)) << what << " dw";
  if (with_db) {
    EXPECT_LE(rel_error(download(gdb, stream), want_db), tolerance(p)) << what << " db";
  }
}
#endif  // TANDEM_HAVE_CUDA

TEST(CudaGemmEpilogue, GeluNeedsFeaturesInMultiplesOfEight) {
#if TANDEM_HAVE_CUDA
  EXPECT_TRUE(cuda::gelu_epilogue_supported(8));
  EXPECT_TRUE(cuda::gelu_epilogue_supported(1024));
  EXPECT_FALSE(cuda::gelu_epilogue_supported(7));
  EXPECT_FALSE(cuda::gelu_epilogue_supported(129));
  EXPECT_FALSE(cuda::gelu_epilogue_supported(0));
#else
  GTEST_SKIP() << "CUDA backend not built";
#endif
}

// Bad arguments are refused before anything reaches the device, so these run without a GPU.
TEST(CudaGemmEpilogue, RefusesBadArguments) {
#if TANDEM_HAVE_CUDA
  // Never dereferenced: every call below throws first.
  float* f = reinterpret_cast<float*>(std::uintptr_t{256});
  BFloat16* h = reinterpret_cast<BFloat16*>(std::uintptr_t{256});
  const LinearDims ok{4, 8, 16};
  using cpu::Activation;
  // GELU keeps [rows, out]: out = 7 is not a multiple of 8.
  EXPECT_THROW(cuda::linear_forward_epilogue(f, f, f, f, f, LinearDims{4, 8, 7}, Activation::gelu,
                                             GemmPrecision::f32, nullptr),
               std::invalid_argument);
  EXPECT_THROW(
      cuda::linear_forward_epilogue(h, h, h, h, h, LinearDims{4, 8, 7}, Activation::gelu, nullptr),
      std::invalid_argument);
  // GELU without somewhere to keep its input.
  EXPECT_THROW(cuda::linear_forward_epilogue(f, f, f, f, nullptr, ok, Activation::gelu,
                                             GemmPrecision::tf32, nullptr),
               std::invalid_argument);
  // float operands at bf16 precision.
  EXPECT_THROW(cuda::linear_forward_epilogue(f, f, f, f, f, ok, Activation::none,
                                             GemmPrecision::bf16, nullptr),
               std::invalid_argument);
  // Empty dimensions and null operands.
  EXPECT_THROW(cuda::linear_forward_epilogue(f, f, f, f, f, LinearDims{0, 8, 16}, Activation::relu,
                                             GemmPrecision::f32, nullptr),
               std::invalid_argument);
  EXPECT_THROW(cuda::linear_forward_epilogue(nullptr, f, f, f, f, ok, Activation::relu,
                                             GemmPrecision::f32, nullptr),
               std::invalid_argument);
  // DGELU reads pre [rows, in]: in = 129.
  EXPECT_THROW(cuda::linear_backward_input_dgelu(f, f, f, f, f, LinearDims{4, 129, 16},
                                                 GemmPrecision::f32, nullptr),
               std::invalid_argument);
  EXPECT_THROW(cuda::linear_backward_input_dgelu(h, h, nullptr, h, h, ok, nullptr),
               std::invalid_argument);
  EXPECT_THROW(
      cuda::linear_backward_weight_bgrad(f, f, nullptr, f, 0.0f, ok, GemmPrecision::f32, nullptr),
      std::invalid_argument);
  EXPECT_THROW(cuda::linear_backward_weight_bgrad(h, h, f, f, 0.0f, LinearDims{4, -1, 16}, nullptr),
               std::invalid_argument);
  try {
    cuda::linear_forward_epilogue(f, f, f, f, f, LinearDims{4, 8, 7}, Activation::gelu,
                                  GemmPrecision::f32, nullptr);
    ADD_FAILURE() << "out = 7 with gelu was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("linear_forward_epilogue"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 7"), std::string::npos) << e.what();
  }
#else
  GTEST_SKIP() << "CUDA backend not built";
#endif
}

TEST(CudaGemmEpilogue, ForwardBiasAndReluMatchCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const GemmPrecision p : kPrecisions) {
    for (const LinearDims& d : kShapes) {
      for (const cpu::Activation act : {cpu::Activation::none, cpu::Activation::relu}) {
        for (const bool bias : {true, false}) check_forward({d, act, bias, p}, stream);
      }
    }
  }
#endif
}

TEST(CudaGemmEpilogue, ForwardGeluMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const GemmPrecision p : kPrecisions) {
    for (const LinearDims& d : kGeluForwardShapes) {
      for (const bool bias : {true, false}) {
        check_forward({d, cpu::Activation::gelu, bias, p}, stream);
      }
    }
  }
#endif
}

// The same shape again reuses its cached plan: new buffers (the cached descriptor must take the
// new bias and aux pointers), then buffers 8 elements past an allocation's start (another
// alignment class, so another plan).
TEST(CudaGemmEpilogue, CachedPlansTakeEachCallsPointers) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const GemmPrecision p : kPrecisions) {
    const ForwardCase c{{129, 64, 1024}, cpu::Activation::gelu, true, p};
    std::vector<float> want_y;
    std::vector<float> want_pre;
    ForwardData first = forward_data(c, 71, want_y, want_pre);
    forward(c, first, 0, stream);
    expect_forward(c, first, want_y, want_pre, stream, label("first", c.d, p, ""));
    ForwardData second = forward_data(c, 81, want_y, want_pre);
    forward(c, second, 0, stream);
    expect_forward(c, second, want_y, want_pre, stream, label("second", c.d, p, ""));

    // Offset copies of the second inputs: each tensor one allocation with 8 leading elements.
    constexpr std::int64_t kOffset = 8;
    auto shifted = [&](const Tensor& t) {
      std::vector<float> v = t.to_float_vector();
      v.insert(v.begin(), static_cast<std::size_t>(kOffset), 0.0f);
      return upload_as(v, p);
    };
    ForwardData third{shifted(second.x), shifted(second.w), shifted(second.b),
                      poisoned_as(kOffset + c.d.rows * c.d.out, p),
                      poisoned_as(kOffset + c.d.rows * c.d.out, p)};
    forward(c, third, kOffset, stream);
    const std::string what = label("offset", c.d, p, "");
    std::vector<float> y = download(third.y, stream);
    std::vector<float> pre = download(third.pre, stream);
    y.erase(y.begin(), y.begin() + kOffset);
    pre.erase(pre.begin(), pre.begin() + kOffset);
    EXPECT_LE(rel_error(y, want_y), tolerance(p)) << what << " y";
    EXPECT_LE(rel_error(pre, want_pre), tolerance(p)) << what << " pre";
  }
#endif
}

TEST(CudaGemmEpilogue, BackwardInputDgeluMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const GemmPrecision p : kPrecisions) {
    for (const LinearDims& d : kGeluBackwardShapes) {
      for (const bool with_db : {true, false}) check_dgelu(d, with_db, p, stream);
    }
  }
#endif
}

TEST(CudaGemmEpilogue, BackwardWeightBgradMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const GemmPrecision p : kPrecisions) {
    for (const LinearDims& d : kShapes) {
      for (const float beta : {0.0f, 1.0f}) {
        for (const bool with_db : {true, false}) check_bgrad(d, beta, with_db, p, stream);
      }
    }
  }
#endif
}

}  // namespace
}  // namespace tandem::models
