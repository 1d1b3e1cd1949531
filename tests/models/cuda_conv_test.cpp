// The convolution, max-pool and dropout kernels of models/kernels/cuda (conv.hpp, dropout.hpp)
// against the CPU kernels. These add the same terms in the same order as the CPU (no atomics,
// the same counter-based generator), so they are compared for exact equality; the convolution
// composed with the cuBLAS GEMM is compared at the f32 tolerance. Built in every
// configuration; every test skips with "no CUDA device" unless the backend is built and a GPU
// is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/device.hpp"
#include "tests/runtime/require_gpu.hpp"

#if TANDEM_HAVE_CUDA
#include <fmt/format.h>

#include "models/kernels/cpu/conv.hpp"
#include "models/kernels/cpu/dropout.hpp"
#include "models/kernels/cpu/gemm.hpp"
#include "models/kernels/cuda/conv.hpp"
#include "models/kernels/cuda/dropout.hpp"
#include "models/kernels/cuda/gemm.hpp"
#include "tests/models/cuda_test_util.hpp"
#endif

namespace tandem::models {
namespace {

#if TANDEM_HAVE_CUDA
using namespace cuda_test;  // NOLINT(google-build-using-namespace): test helpers only
using cpu::ConvGeometry;

constexpr std::int64_t kSamples = 3;

// Padding wider and narrower than the kernel, strides that skip columns, a 1x1 kernel, odd
// planes.
ConvGeometry geometry(std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k,
                      std::int64_t stride, std::int64_t pad) {
  ConvGeometry g;
  g.channels = c;
  g.height = h;
  g.width = w;
  g.kernel_h = k;
  g.kernel_w = k;
  g.stride = stride;
  g.pad_h = pad;
  g.pad_w = pad;
  return g;
}

const std::vector<ConvGeometry> kConvGeometries = {
    geometry(3, 11, 13, 3, 1, 1), geometry(2, 9, 8, 3, 2, 0), geometry(4, 7, 7, 5, 2, 2),
    geometry(1, 5, 5, 1, 1, 0), geometry(2, 6, 10, 3, 3, 1),
    // Inception's rectangular windows: 1x7 padded (0, 3), 7x1 padded (3, 0), 1x3 strided.
    ConvGeometry(3, 9, 10, 1, 7, 1, 0, 3), ConvGeometry(2, 8, 9, 7, 1, 1, 3, 0),
    ConvGeometry(2, 7, 9, 1, 3, 2, 0, 1)};

// Overlapping windows (stride < kernel) add gradients; padding (ResNet's 3x3, stride 2, pad 1
// stem pool) never wins.
const std::vector<ConvGeometry> kPoolGeometries = {
    geometry(3, 8, 8, 2, 2, 0),  geometry(2, 9, 11, 3, 2, 0),
    geometry(1, 7, 5, 3, 1, 0),  geometry(5, 33, 17, 2, 2, 0),
    geometry(2, 9, 10, 3, 2, 1), ConvGeometry(2, 7, 8, 3, 2, 2, 1, 1)};

std::string label(const ConvGeometry& g) {
  return fmt::format("c={} h={} w={} kernel={}x{} stride={} pad={},{}", g.channels, g.height,
                     g.width, g.kernel_h, g.kernel_w, g.stride, g.pad_h, g.pad_w);
}

// Exact equality, NaN (an unwritten element) never equal.
bool same(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) return false;
  }
  return true;
}

// Small integers: many ties inside a pooling window, which must resolve to the first maximum.
std::vector<float> tied_floats(std::int64_t n, std::uint32_t seed) {
  std::vector<float> v = random_floats(n, seed, 0.0f, 4.0f);
  for (float& x : v) x = std::floor(x);
  return v;
}
#endif  // TANDEM_HAVE_CUDA

TEST(CudaKernels, Im2colCol2imMatchCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const ConvGeometry& g : kConvGeometries) {
    const std::int64_t col_size = g.col_rows() * kSamples * g.out_hw();
    const std::int64_t x_size = kSamples * g.sample_size();
    const std::vector<float> x = random_floats(x_size, 41);
    std::vector<float> want_col(static_cast<std::size_t>(col_size));
    cpu::im2col(x.data(), g, kSamples, want_col.data());
    const Tensor gx = upload(x);
    Tensor gcol = poisoned(col_size);
    cuda::im2col(dev(gx), g, kSamples, dev(gcol), stream.native_handle());
    EXPECT_TRUE(same(download(gcol, stream), want_col)) << "im2col " << label(g);

    const std::vector<float> col = random_floats(col_size, 42);
    std::vector<float> want_dx(static_cast<std::size_t>(x_size));
    cpu::col2im(col.data(), g, kSamples, want_dx.data());
    const Tensor gcol_in = upload(col);
    Tensor gdx = poisoned(x_size);
    cuda::col2im(dev(gcol_in), g, kSamples, dev(gdx), stream.native_handle());
    EXPECT_TRUE(same(download(gdx, stream), want_dx)) << "col2im " << label(g);
  }
#endif
}

TEST(CudaKernels, ChannelMajorPermutesMatchCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const auto& [n, c, hw] :
       {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {3, 5, 49}, {7, 2, 300}}) {
    const std::string what = fmt::format("n={} c={} hw={}", n, c, hw);
    const std::vector<float> x = random_floats(n * c * hw, 43);
    std::vector<float> want_cm(x.size());
    std::vector<float> want_nchw(x.size());
    cpu::nchw_to_cm(x.data(), n, c, hw, want_cm.data());
    cpu::cm_to_nchw(x.data(), n, c, hw, want_nchw.data());
    const Tensor gx = upload(x);
    Tensor gcm = poisoned(n * c * hw);
    Tensor gnchw = poisoned(n * c * hw);
    cuda::nchw_to_cm(dev(gx), n, c, hw, dev(gcm), stream.native_handle());
    cuda::cm_to_nchw(dev(gx), n, c, hw, dev(gnchw), stream.native_handle());
    EXPECT_TRUE(same(download(gcm, stream), want_cm)) << "nchw_to_cm " << what;
    EXPECT_TRUE(same(download(gnchw, stream), want_nchw)) << "cm_to_nchw " << what;
  }
#endif
}

// The convolution as layers/conv2d.cpp composes it, on both devices: forward y = W * im2col(x)
// then back to NCHW; backward dW = dz_cm * col^T and dx = col2im(W^T * dz_cm).
TEST(CudaKernels, Conv2dThroughGemmMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  void* s = stream.native_handle();
  constexpr std::int64_t kOut = 6;
  for (const ConvGeometry& g : kConvGeometries) {
    const std::string what = label(g);
    const std::int64_t ckk = g.col_rows();
    const std::int64_t cols = kSamples * g.out_hw();
    const std::int64_t x_size = kSamples * g.sample_size();
    const std::vector<float> x = random_floats(x_size, 44);
    const std::vector<float> w = random_floats(kOut * ckk, 45);
    const std::vector<float> dz = random_floats(kOut * cols, 46);

    std::vector<float> col(static_cast<std::size_t>(ckk * cols));
    std::vector<float> ycm(static_cast<std::size_t>(kOut * cols));
    std::vector<float> want_y(ycm.size());
    cpu::im2col(x.data(), g, kSamples, col.data());
    cpu::gemm(false, false, kOut, cols, ckk, 1.0f, w.data(), ckk, col.data(), cols, 0.0f,
              ycm.data(), cols);
    cpu::cm_to_nchw(ycm.data(), kSamples, kOut, g.out_hw(), want_y.data());
    std::vector<float> dzcm(dz.size());
    std::vector<float> want_dw(w.size());
    std::vector<float> dcol(col.size());
    std::vector<float> want_dx(static_cast<std::size_t>(x_size));
    cpu::nchw_to_cm(dz.data(), kSamples, kOut, g.out_hw(), dzcm.data());
    cpu::gemm(false, true, kOut, ckk, cols, 1.0f, dzcm.data(), cols, col.data(), cols, 0.0f,
              want_dw.data(), ckk);
    cpu::gemm(true, false, ckk, cols, kOut, 1.0f, w.data(), ckk, dzcm.data(), cols, 0.0f,
              dcol.data(), cols);
    cpu::col2im(dcol.data(), g, kSamples, want_dx.data());

    const Tensor gx = upload(x);
    const Tensor gw = upload(w);
    const Tensor gdz = upload(dz);
    Tensor gcol = poisoned(ckk * cols);
    Tensor gycm = poisoned(kOut * cols);
    Tensor gy = poisoned(kOut * cols);
    Tensor gdzcm = poisoned(kOut * cols);
    Tensor gdw = poisoned(kOut * ckk);
    Tensor gdcol = poisoned(ckk * cols);
    Tensor gdx = poisoned(x_size);
    const auto f32 = cuda::GemmPrecision::f32;
    cuda::im2col(dev(gx), g, kSamples, dev(gcol), s);
    cuda::gemm(false, false, kOut, cols, ckk, 1.0f, dev(gw), ckk, dev(gcol), cols, 0.0f, dev(gycm),
               cols, f32, s);
    cuda::cm_to_nchw(dev(gycm), kSamples, kOut, g.out_hw(), dev(gy), s);
    cuda::nchw_to_cm(dev(gdz), kSamples, kOut, g.out_hw(), dev(gdzcm), s);
    cuda::gemm(false, true, kOut, ckk, cols, 1.0f, dev(gdzcm), cols, dev(gcol), cols, 0.0f,
               dev(gdw), ckk, f32, s);
    cuda::gemm(true, false, ckk, cols, kOut, 1.0f, dev(gw), ckk, dev(gdzcm), cols, 0.0f, dev(gdcol),
               cols, f32, s);
    cuda::col2im(dev(gdcol), g, kSamples, dev(gdx), s);
    EXPECT_LE(rel_error(download(gy, stream), want_y), 1e-5) << what << " y";
    EXPECT_LE(rel_error(download(gdw, stream), want_dw), 1e-5) << what << " dW";
    EXPECT_LE(rel_error(download(gdx, stream), want_dx), 1e-5) << what << " dx";
  }
#endif
}

TEST(CudaKernels, MaxPoolMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const ConvGeometry& g : kPoolGeometries) {
    const std::string what = label(g);
    const std::int64_t x_size = kSamples * g.sample_size();
    const std::int64_t y_size = kSamples * g.channels * g.out_hw();
    const std::vector<float> x = tied_floats(x_size, 47);
    std::vector<float> want_y(static_cast<std::size_t>(y_size));
    std::vector<std::int32_t> want_arg(static_cast<std::size_t>(y_size));
    cpu::max_pool_forward(x.data(), g, kSamples, want_y.data(), want_arg.data());
    const Tensor gx = upload(x);
    Tensor gy = poisoned(y_size);
    Tensor garg = upload(std::vector<std::int32_t>(static_cast<std::size_t>(y_size), -1));
    cuda::max_pool_forward(dev(gx), g, kSamples, dev(gy), dev_ids(garg), stream.native_handle());
    EXPECT_TRUE(same(download(gy, stream), want_y)) << what << " y";
    EXPECT_EQ(download_ids(garg, stream), want_arg) << what << " argmax";

    const std::vector<float> dy = random_floats(y_size, 48);
    std::vector<float> want_dx(static_cast<std::size_t>(x_size));
    cpu::max_pool_backward(dy.data(), want_arg.data(), g, kSamples, want_dx.data());
    const Tensor gdy = upload(dy);
    const Tensor garg_in = upload(want_arg);
    Tensor gdx = poisoned(x_size);
    cuda::max_pool_backward(dev(gdy), dev_ids(garg_in), g, kSamples, dev(gdx),
                            stream.native_handle());
    EXPECT_TRUE(same(download(gdx, stream), want_dx)) << what << " dx";
  }
#endif
}

TEST(CudaKernels, DropoutMatchesCpuExactly) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  constexpr std::uint64_t kKey = 0x5eed'1234'abcd'0001ULL;
  for (const float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
    for (const auto& [samples, per_sample, first] :
         {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 0},
          {7, 1000, 5},
          {3, 70001, 1234567}}) {
      const std::string what =
          fmt::format("p={} samples={} per_sample={} first={}", p, samples, per_sample, first);
      const std::vector<float> x = random_floats(samples * per_sample, 49);
      std::vector<float> want(x.size());
      cpu::dropout_apply(x.data(), want.data(), samples, per_sample, p, kKey, first);
      const Tensor gx = upload(x);
      Tensor gy = poisoned(samples * per_sample);
      cuda::dropout_apply(dev(gx), dev(gy), samples, per_sample, p, kKey, first,
                          stream.native_handle());
      EXPECT_TRUE(same(download(gy, stream), want)) << what;
    }
  }
#endif
}

}  // namespace
}  // namespace tandem::models
