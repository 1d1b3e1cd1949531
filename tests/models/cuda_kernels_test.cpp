// The CUDA kernels of models/kernels/cuda against their CPU twins (or, for the row softmax,
// which the CPU keeps private to attention, against a double-precision reference) on random
// inputs. Built in every configuration; every test skips with "no CUDA device" unless the
// backend is built and a GPU is present. The GPU is reached only through the runtime (Tensor on
// cuda:0, Stream, copy_from) and the kernels' headers.
//
// Error norm: max_i |gpu_i - ref_i| / max_i |ref_i|, the error relative to the largest reference
// magnitude, so elements near zero neither dominate nor escape (a pure per-element relative
// error blows up at zero). A NaN or infinity anywhere in either side, or a length mismatch,
// counts as an infinite error. Outputs are filled with NaN before each run, so an element a
// kernel leaves unwritten fails the comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/stream.hpp"
#include "runtime/tensor.hpp"
#include "tests/runtime/require_gpu.hpp"

#if TANDEM_HAVE_CUDA
#include "models/kernels/cpu/activation.hpp"
#include "models/kernels/cpu/cross_entropy.hpp"
#include "models/kernels/cpu/elementwise.hpp"
#include "models/kernels/cpu/embedding.hpp"
#include "models/kernels/cpu/layer_norm.hpp"
#include "models/kernels/cpu/reduce.hpp"
#include "models/kernels/cuda/activation.hpp"
#include "models/kernels/cuda/cross_entropy.hpp"
#include "models/kernels/cuda/elementwise.hpp"
#include "models/kernels/cuda/embedding.hpp"
#include "models/kernels/cuda/layer_norm.hpp"
#include "models/kernels/cuda/optimizer.hpp"
#include "models/kernels/cuda/reduce.hpp"
#include "models/kernels/cuda/softmax.hpp"
#include "models/kernels/kernels.hpp"
#include "models/optimizer.hpp"
#include "models/param_set.hpp"
#include "tests/models/cuda_test_util.hpp"
#endif

namespace tandem::models {
namespace {

// The body after this runs only when the kernels exist and a GPU can run them; without the
// backend cuda_device_count() is 0, so the #if'd bodies below are never needed there.
#if TANDEM_HAVE_CUDA

constexpr double kTolerance = 1e-5;
using namespace cuda_test;

#define EXPECT_CLOSE(got, want, what) EXPECT_LE(rel_error(got, want), kTolerance) << (what)

std::vector<std::int32_t> random_ids(std::int64_t n, std::int32_t bound, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, bound - 1);
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (std::int32_t& x : v) x = dist(gen);
  return v;
}

struct RowShape {
  std::int64_t rows;
  std::int64_t cols;
};

// Around the 256-thread blocks and 32-column tiles: single elements, partial tiles, rows longer
// than a block, and more rows than a column reduction's 16 lanes.
const std::vector<RowShape> kShapes = {{1, 1}, {3, 5}, {7, 257}, {33, 1000}, {130, 64}, {300, 31}};
const std::vector<std::int64_t> kLengths = {1, 31, 255, 257, 1000, 65537};
const std::vector<cpu::Activation> kActs = {cpu::Activation::none, cpu::Activation::relu,
                                            cpu::Activation::gelu, cpu::Activation::sigmoid,
                                            cpu::Activation::tanh};

std::string label(const RowShape& s) {
  return std::string("[") + std::to_string(s.rows) + ", " + std::to_string(s.cols) + "]";
}

std::string label(cpu::Activation act, std::int64_t n) {
  return std::string(cpu::activation_name(act)) + " n=" + std::to_string(n);
}

#endif  // TANDEM_HAVE_CUDA

TEST(CudaKernels, ActForwardMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const cpu::Activation act : kActs) {
    for (const std::int64_t n : kLengths) {
      const std::vector<float> x = random_floats(n, 1);
      std::vector<float> want(x.size());
      cpu::act_forward(x.data(), want.data(), n, act);
      const Tensor gx = upload(x);
      Tensor gy = poisoned(n);
      cuda::act_forward(dev(gx), dev(gy), n, act, stream.native_handle());
      EXPECT_CLOSE(download(gy, stream), want, label(act, n));
    }
  }
#endif
}

TEST(CudaKernels, ActBackwardMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const cpu::Activation act : kActs) {
    for (const std::int64_t n : kLengths) {
      const std::vector<float> dy = random_floats(n, 2);
      const std::vector<float> saved = random_floats(n, 3);
      std::vector<float> want(dy.size());
      cpu::act_backward(dy.data(), saved.data(), want.data(), n, act);
      const Tensor gdy = upload(dy);
      const Tensor gsaved = upload(saved);
      Tensor gdz = poisoned(n);
      cuda::act_backward(dev(gdy), dev(gsaved), dev(gdz), n, act, stream.native_handle());
      EXPECT_CLOSE(download(gdz, stream), want, label(act, n));
    }
  }
#endif
}

TEST(CudaKernels, BiasActForwardMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const cpu::Activation act : kActs) {
    for (const RowShape s : kShapes) {
      const std::int64_t n = s.rows * s.cols;
      const std::string what = std::string(cpu::activation_name(act)) + " " + label(s);
      const std::vector<float> y0 = random_floats(n, 4);
      const std::vector<float> bias = random_floats(s.cols, 5);
      std::vector<float> want = y0;
      std::vector<float> want_pre(static_cast<std::size_t>(n));
      cpu::bias_act_forward(want.data(), bias.data(), s.rows, s.cols, act, want_pre.data());
      Tensor gy = upload(y0);
      const Tensor gbias = upload(bias);
      Tensor gpre = poisoned(n);
      cuda::bias_act_forward(dev(gy), dev(gbias), s.rows, s.cols, act, dev(gpre),
                             stream.native_handle());
      EXPECT_CLOSE(download(gy, stream), want, what);
      if (act == cpu::Activation::gelu) {
        EXPECT_CLOSE(download(gpre, stream), want_pre, what);
      }
    }
  }
#endif
}

TEST(CudaKernels, ActBackwardBiasMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const cpu::Activation act : kActs) {
    for (const RowShape s : kShapes) {
      for (const float beta : {0.0f, 0.5f}) {
        const std::int64_t n = s.rows * s.cols;
        const std::string what = std::string(cpu::activation_name(act)) + " " + label(s) +
                                 " beta=" + std::to_string(beta);
        const std::vector<float> dy = random_floats(n, 6);
        const std::vector<float> saved = random_floats(n, 7);
        const std::vector<float> db0 = random_floats(s.cols, 8);
        std::vector<float> want_dz(dy.size());
        std::vector<float> want_db = db0;
        cpu::act_backward_bias(dy.data(), saved.data(), want_dz.data(), s.rows, s.cols, act,
                               want_db.data(), 0.75f, beta);
        const Tensor gdy = upload(dy);
        const Tensor gsaved = upload(saved);
        Tensor gdz = poisoned(n);
        // beta = 0 must not read db: poisoned, a read would show as NaN.
        Tensor gdb = beta == 0.0f ? poisoned(s.cols) : upload(db0);
        cuda::act_backward_bias(dev(gdy), dev(gsaved), dev(gdz), s.rows, s.cols, act, dev(gdb),
                                0.75f, beta, stream.native_handle());
        EXPECT_CLOSE(download(gdz, stream), want_dz, what);
        EXPECT_CLOSE(download(gdb, stream), want_db, what);
      }
    }
  }
#endif
}

TEST(CudaKernels, ColumnSumMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const RowShape s : kShapes) {
    for (const float beta : {0.0f, -1.5f}) {
      const std::string what = label(s) + " beta=" + std::to_string(beta);
      const std::vector<float> x = random_floats(s.rows * s.cols, 9);
      const std::vector<float> out0 = random_floats(s.cols, 10);
      std::vector<float> want = out0;
      cpu::column_sum(x.data(), s.rows, s.cols, 2.0f, beta, want.data());
      const Tensor gx = upload(x);
      Tensor gout = beta == 0.0f ? poisoned(s.cols) : upload(out0);
      cuda::column_sum(dev(gx), s.rows, s.cols, 2.0f, beta, dev(gout), stream.native_handle());
      EXPECT_CLOSE(download(gout, stream), want, what);
    }
  }
#endif
}

#if TANDEM_HAVE_CUDA
// Row r of [rows, cols] covers columns [0, r % cols] when causal (attention's stacked masks).
std::int64_t valid_cols(std::int64_t r, std::int64_t cols, bool causal) {
  return causal ? r % cols + 1 : cols;
}

std::vector<float> softmax_reference(const std::vector<float>& x, RowShape s, bool causal) {
  std::vector<float> y(x.size(), 0.0f);
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const float* xr = x.data() + r * s.cols;
    const std::int64_t valid = valid_cols(r, s.cols, causal);
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < valid; ++c) mx = std::max(mx, static_cast<double>(xr[c]));
    double sum = 0;
    for (std::int64_t c = 0; c < valid; ++c) sum += std::exp(xr[c] - mx);
    for (std::int64_t c = 0; c < valid; ++c) {
      y[static_cast<std::size_t>(r * s.cols + c)] = static_cast<float>(std::exp(xr[c] - mx) / sum);
    }
  }
  return y;
}
#endif

// multiply (fresh over NaN and accumulating), exp, log and fill: the public Kernels' element-wise
// maths, each in place as the header allows.
TEST(CudaKernels, ElementwiseMathMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  void* h = stream.native_handle();
  for (const std::int64_t n : kLengths) {
    const std::string what = "n=" + std::to_string(n);
    const std::vector<float> a = random_floats(n, 30), b = random_floats(n, 31);
    const std::vector<float> pos = random_floats(n, 32, 1e-3f, 20.0f);
    const std::vector<float> acc0 = random_floats(n, 33);
    std::vector<float> prod(a.size()), acc = acc0, e(a.size()), l(a.size());
    cpu::multiply(a.data(), b.data(), 1.5f, 0.0f, prod.data(), n);
    cpu::multiply(a.data(), b.data(), -0.5f, 2.0f, acc.data(), n);
    cpu::exp(a.data(), e.data(), n);
    cpu::log(pos.data(), l.data(), n);
    Tensor ga = upload(a), gb = upload(b), gprod = poisoned(n), gacc = upload(acc0);
    Tensor gpos = upload(pos), gfill = poisoned(n);
    cuda::multiply(dev(ga), dev(gb), 1.5f, 0.0f, dev(gprod), n, h);
    cuda::multiply(dev(ga), dev(gb), -0.5f, 2.0f, dev(gacc), n, h);
    cuda::exp(dev(ga), dev(ga), n, h);
    cuda::log(dev(gpos), dev(gpos), n, h);
    cuda::fill(dev(gfill), n, 0.25f, h);
    EXPECT_CLOSE(download(gprod, stream), prod, "multiply " + what);
    EXPECT_CLOSE(download(gacc, stream), acc, "multiply-accumulate " + what);
    EXPECT_CLOSE(download(ga, stream), e, "exp " + what);
    EXPECT_CLOSE(download(gpos, stream), l, "log " + what);
    EXPECT_EQ(download(gfill, stream), std::vector<float>(a.size(), 0.25f)) << what;
  }
#endif
}

TEST(CudaKernels, RowMaxMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const RowShape s : kShapes) {
    const std::vector<float> x = random_floats(s.rows * s.cols, 34);
    std::vector<float> want(static_cast<std::size_t>(s.rows));
    cpu::row_max(x.data(), s.rows, s.cols, want.data());
    const Tensor gx = upload(x);
    Tensor gout = poisoned(s.rows);
    cuda::row_max(dev(gx), s.rows, s.cols, dev(gout), stream.native_handle());
    EXPECT_EQ(download(gout, stream), want) << label(s);
  }
#endif
}

TEST(CudaKernels, SoftmaxForwardMatchesReference) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const bool causal : {false, true}) {
    for (const RowShape s : kShapes) {
      // Logits around 1000: exp overflows f32 unless the row maximum is subtracted first.
      const std::vector<float> x = random_floats(s.rows * s.cols, 11, 990.0f, 1010.0f);
      const std::vector<float> want = softmax_reference(x, s, causal);
      const std::string what = label(s) + (causal ? " causal" : "");
      const Tensor gx = upload(x);
      Tensor gy = poisoned(s.rows * s.cols);
      cuda::softmax_forward(dev(gx), dev(gy), s.rows, s.cols, causal, stream.native_handle());
      EXPECT_CLOSE(download(gy, stream), want, what);
    }
  }
#endif
}

TEST(CudaKernels, SoftmaxBackwardMatchesReference) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const bool causal : {false, true}) {
    for (const RowShape s : kShapes) {
      const std::vector<float> y = softmax_reference(random_floats(s.rows * s.cols, 12), s, causal);
      const std::vector<float> dy = random_floats(s.rows * s.cols, 13);
      std::vector<float> want(y.size(), 0.0f);
      for (std::int64_t r = 0; r < s.rows; ++r) {
        const std::int64_t valid = valid_cols(r, s.cols, causal);
        double dot = 0;
        for (std::int64_t c = 0; c < valid; ++c) {
          dot += static_cast<double>(y[r * s.cols + c]) * dy[r * s.cols + c];
        }
        for (std::int64_t c = 0; c < valid; ++c) {
          const auto i = static_cast<std::size_t>(r * s.cols + c);
          want[i] = static_cast<float>(y[i] * (dy[i] - dot));
        }
      }
      const std::string what = label(s) + (causal ? " causal" : "");
      const Tensor gy = upload(y);
      const Tensor gdy = upload(dy);
      Tensor gdx = poisoned(s.rows * s.cols);
      cuda::softmax_backward(dev(gy), dev(gdy), dev(gdx), s.rows, s.cols, causal,
                             stream.native_handle());
      EXPECT_CLOSE(download(gdx, stream), want, what);
    }
  }
#endif
}

TEST(CudaKernels, LayerNormForwardMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const RowShape s : kShapes) {
    const std::int64_t n = s.rows * s.cols;
    // A mean far from zero: the two-pass variance must hold up against cancellation.
    const std::vector<float> x = random_floats(n, 14, 3.0f, 7.0f);
    const std::vector<float> gamma = random_floats(s.cols, 15);
    const std::vector<float> beta = random_floats(s.cols, 16);
    std::vector<float> want_y(x.size());
    std::vector<float> want_xhat(x.size());
    std::vector<float> want_rstd(static_cast<std::size_t>(s.rows));
    cpu::layer_norm_forward(x.data(), gamma.data(), beta.data(), want_y.data(), want_xhat.data(),
                            want_rstd.data(), s.rows, s.cols, 1e-5f);
    const Tensor gx = upload(x);
    const Tensor ggamma = upload(gamma);
    const Tensor gbeta = upload(beta);
    Tensor gy = poisoned(n);
    Tensor gxhat = poisoned(n);
    Tensor grstd = poisoned(s.rows);
    cuda::layer_norm_forward(dev(gx), dev(ggamma), dev(gbeta), dev(gy), dev(gxhat), dev(grstd),
                             s.rows, s.cols, 1e-5f, stream.native_handle());
    EXPECT_CLOSE(download(gy, stream), want_y, std::string("y ") + label(s));
    EXPECT_CLOSE(download(gxhat, stream), want_xhat, std::string("xhat ") + label(s));
    EXPECT_CLOSE(download(grstd, stream), want_rstd, std::string("rstd ") + label(s));
  }
#endif
}

TEST(CudaKernels, LayerNormBackwardMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const RowShape s : kShapes) {
    for (const float beta : {0.0f, 0.5f}) {
      const std::int64_t n = s.rows * s.cols;
      const std::string what = label(s) + " beta=" + std::to_string(beta);
      // xhat and rstd from a forward pass, so the inputs are consistent.
      const std::vector<float> x = random_floats(n, 17);
      const std::vector<float> gamma = random_floats(s.cols, 18);
      const std::vector<float> zeros(static_cast<std::size_t>(s.cols), 0.0f);
      std::vector<float> y(x.size());
      std::vector<float> xhat(x.size());
      std::vector<float> rstd(static_cast<std::size_t>(s.rows));
      cpu::layer_norm_forward(x.data(), gamma.data(), zeros.data(), y.data(), xhat.data(),
                              rstd.data(), s.rows, s.cols, 1e-5f);
      const std::vector<float> dy = random_floats(n, 19);
      const std::vector<float> dgamma0 = random_floats(s.cols, 20);
      const std::vector<float> dbeta0 = random_floats(s.cols, 21);
      std::vector<float> want_dx(x.size());
      std::vector<float> want_dgamma = dgamma0;
      std::vector<float> want_dbeta = dbeta0;
      cpu::layer_norm_backward_input(dy.data(), xhat.data(), rstd.data(), gamma.data(),
                                     want_dx.data(), s.rows, s.cols);
      cpu::layer_norm_backward_weight(dy.data(), xhat.data(), want_dgamma.data(), want_dbeta.data(),
                                      s.rows, s.cols, 1.0f, beta);
      const Tensor gdy = upload(dy);
      const Tensor gxhat = upload(xhat);
      const Tensor grstd = upload(rstd);
      const Tensor ggamma = upload(gamma);
      Tensor gdx = poisoned(n);
      Tensor gdgamma = beta == 0.0f ? poisoned(s.cols) : upload(dgamma0);
      Tensor gdbeta = beta == 0.0f ? poisoned(s.cols) : upload(dbeta0);
      cuda::layer_norm_backward_input(dev(gdy), dev(gxhat), dev(grstd), dev(ggamma), dev(gdx),
                                      s.rows, s.cols, stream.native_handle());
      cuda::layer_norm_backward_weight(dev(gdy), dev(gxhat), dev(gdgamma), dev(gdbeta), s.rows,
                                       s.cols, 1.0f, beta, stream.native_handle());
      // cols = 1: xhat is 0 and dx is exactly 0 on both sides.
      EXPECT_CLOSE(download(gdx, stream), want_dx, "dx " + what);
      EXPECT_CLOSE(download(gdgamma, stream), want_dgamma, "dgamma " + what);
      EXPECT_CLOSE(download(gdbeta, stream), want_dbeta, "dbeta " + what);
    }
  }
#endif
}

#if TANDEM_HAVE_CUDA
struct EmbeddingShape {
  std::int64_t batch;
  std::int64_t seq;
  std::int64_t vocab;
  std::int64_t dim;
};

// Small vocabularies against many positions: most table rows receive several ids, so the
// backward's atomics really contend.
const std::vector<EmbeddingShape> kEmbeddingShapes = {
    {1, 1, 1, 1}, {2, 3, 5, 7}, {4, 33, 10, 257}, {8, 64, 100, 48}};

std::string label(const EmbeddingShape& s) {
  return std::string("batch=") + std::to_string(s.batch) + " seq=" + std::to_string(s.seq) +
         " vocab=" + std::to_string(s.vocab) + " dim=" + std::to_string(s.dim);
}
#endif

// Token ids that travel as exact floats in a mixed-dtype packed input come back as the same ids:
// up to 2^24 (the largest run of exact float integers), negative ones, and fractions rounded
// toward zero as the CPU's cast does.
TEST(CudaKernels, F32ToI32MatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const std::int64_t n : kLengths) {
    std::vector<float> x = random_floats(n, 31, -100.0f, 100.0f);
    x[0] = 16777215.0f;  // 2^24 - 1
    if (n > 1) x[1] = -7.0f;
    std::vector<std::int32_t> want(static_cast<std::size_t>(n));
    cpu_kernels().f32_to_i32(x.data(), want.data(), n);
    const Tensor gx = upload(x);
    Tensor gy = upload(std::vector<std::int32_t>(static_cast<std::size_t>(n), -1));
    cuda::f32_to_i32(dev(gx), dev_ids(gy), n, stream.native_handle());
    EXPECT_EQ(download_ids(gy, stream), want) << "n=" << n;
    EXPECT_EQ(want[0], 16777215);
  }
#endif
}

TEST(CudaKernels, EmbeddingForwardMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const EmbeddingShape s : kEmbeddingShapes) {
    for (const bool with_pos : {false, true}) {
      const std::int64_t n = s.batch * s.seq;
      const std::vector<std::int32_t> ids = random_ids(n, static_cast<std::int32_t>(s.vocab), 22);
      const std::vector<float> table = random_floats(s.vocab * s.dim, 23);
      const std::vector<float> pos = random_floats(s.seq * s.dim, 24);
      std::vector<float> want(static_cast<std::size_t>(n * s.dim));
      cpu::embedding_forward(ids.data(), table.data(), with_pos ? pos.data() : nullptr, want.data(),
                             s.batch, s.seq, s.vocab, s.dim);
      const Tensor gids = upload(ids);
      const Tensor gtable = upload(table);
      const Tensor gpos = upload(pos);
      Tensor gy = poisoned(n * s.dim);
      cuda::embedding_forward(dev_ids(gids), dev(gtable), with_pos ? dev(gpos) : nullptr, dev(gy),
                              s.batch, s.seq, s.vocab, s.dim, stream.native_handle());
      EXPECT_CLOSE(download(gy, stream), want, label(s) + (with_pos ? " pos" : ""));
    }
  }
#endif
}

TEST(CudaKernels, EmbeddingBackwardMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const EmbeddingShape s : kEmbeddingShapes) {
    for (const float beta : {0.0f, 0.5f}) {
      const std::int64_t n = s.batch * s.seq;
      const std::string what = label(s) + " beta=" + std::to_string(beta);
      const std::vector<std::int32_t> ids = random_ids(n, static_cast<std::int32_t>(s.vocab), 25);
      const std::vector<float> dy = random_floats(n * s.dim, 26);
      const std::vector<float> dtable0 = random_floats(s.vocab * s.dim, 27);
      const std::vector<float> dpos0 = random_floats(s.seq * s.dim, 28);
      std::vector<float> want_dtable = dtable0;
      std::vector<float> want_dpos = dpos0;
      cpu::embedding_backward(ids.data(), dy.data(), want_dtable.data(), want_dpos.data(), s.batch,
                              s.seq, s.vocab, s.dim, 0.5f, beta);
      const Tensor gids = upload(ids);
      const Tensor gdy = upload(dy);
      Tensor gdtable = beta == 0.0f ? poisoned(s.vocab * s.dim) : upload(dtable0);
      Tensor gdpos = beta == 0.0f ? poisoned(s.seq * s.dim) : upload(dpos0);
      cuda::embedding_backward(dev_ids(gids), dev(gdy), dev(gdtable), dev(gdpos), s.batch, s.seq,
                               s.vocab, s.dim, 0.5f, beta, stream.native_handle());
      EXPECT_CLOSE(download(gdtable, stream), want_dtable, "dtable " + what);
      EXPECT_CLOSE(download(gdpos, stream), want_dpos, "dpos " + what);
    }
  }
#endif
}

TEST(CudaKernels, CrossEntropyMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const RowShape s : kShapes) {
    const std::int64_t n = s.rows * s.cols;
    const std::string what = label(s);
    // Wide logits so the argmax is usually unique and some rows are right, some wrong.
    const std::vector<float> logits = random_floats(n, 29, -8.0f, 8.0f);
    const std::vector<std::int32_t> targets =
        random_ids(s.rows, static_cast<std::int32_t>(s.cols), 30);
    const float scale = 1.0f / static_cast<float>(s.rows);  // the mean over rows
    std::vector<float> want_d(logits.size());
    const cpu::CrossEntropySums want =
        cpu::cross_entropy(logits.data(), targets.data(), s.rows, s.cols, want_d.data(), scale);
    const Tensor glogits = upload(logits);
    const Tensor gtargets = upload(targets);
    Tensor gd = poisoned(n);
    // Device memory for the sums and the scratch, as raw bytes in f32 tensors (poisoned too).
    const auto floats_for = [](std::size_t bytes) {
      return static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
    };
    Tensor gsums = poisoned(floats_for(sizeof(cpu::CrossEntropySums)));
    Tensor gscratch = poisoned(floats_for(cuda::cross_entropy_scratch_bytes(s.rows)));
    cuda::cross_entropy(dev(glogits), dev_ids(gtargets), s.rows, s.cols, dev(gd), scale,
                        static_cast<cpu::CrossEntropySums*>(gsums.raw_data()), gscratch.raw_data(),
                        stream.native_handle());
    EXPECT_CLOSE(download(gd, stream), want_d, "dlogits " + what);
    const std::vector<float> sums_words = download(gsums, stream);
    cpu::CrossEntropySums got;
    std::memcpy(static_cast<void*>(&got), sums_words.data(), sizeof got);
    EXPECT_TRUE(std::isfinite(got.loss_sum)) << what;
    EXPECT_LE(std::abs(got.loss_sum - want.loss_sum),
              kTolerance * std::max(std::abs(want.loss_sum), 1.0))
        << "loss_sum " << what << ": " << got.loss_sum << " vs " << want.loss_sum;
    EXPECT_EQ(got.correct, want.correct) << what;
  }
#endif
}

#if TANDEM_HAVE_CUDA
// Specs built field by field: GCC 12 warns (maybe-uninitialized) on std::string members of
// brace-initialised arrays of specs.
OptimizerSpec sgd_spec(double lr, double momentum, double weight_decay, bool nesterov) {
  OptimizerSpec spec;
  spec.kind = "sgd";
  spec.lr = lr;
  spec.momentum = momentum;
  spec.weight_decay = weight_decay;
  spec.nesterov = nesterov;
  return spec;
}

OptimizerSpec adamw_spec(double lr, double weight_decay, double beta1, double beta2, double eps) {
  OptimizerSpec spec;
  spec.kind = "adamw";
  spec.lr = lr;
  spec.weight_decay = weight_decay;
  spec.beta1 = beta1;
  spec.beta2 = beta2;
  spec.eps = eps;
  return spec;
}

void expect_update_matches(const OptimizerSpec& spec, const std::string& name, std::int64_t n) {
  const std::string what = name + " n=" + std::to_string(n);
  Stream stream(Device::cuda(0));
  const std::vector<float> p0 = random_floats(n, 31);
  ParamSet params;
  params.add("w", Tensor::from_vector(p0, {n}));
  const auto opt = make_optimizer(spec);
  Tensor gp = upload(p0);
  Tensor gbuf = poisoned(n);  // SGD writes it on the first step before reading it
  Tensor gm = upload(std::vector<float>(static_cast<std::size_t>(n), 0.0f));
  Tensor gv = upload(std::vector<float>(static_cast<std::size_t>(n), 0.0f));
  for (std::int64_t step = 0; step < 3; ++step) {
    const std::vector<float> g = random_floats(n, 32 + static_cast<std::uint32_t>(step));
    ParamSet grads;
    grads.add("w", Tensor::from_vector(g, {n}));
    opt->step(params, grads);
    const Tensor gg = upload(g);
    if (spec.kind == "sgd") {
      cuda::sgd_update(dev(gp), dev(gg), dev(gbuf), dev(gp), n, spec.lr, spec.weight_decay,
                       spec.momentum, spec.nesterov, step == 0, stream.native_handle());
    } else {
      cuda::adamw_update(dev(gp), dev(gg), dev(gm), dev(gv), dev(gp), n, spec.lr, spec.weight_decay,
                         spec.beta1, spec.beta2, spec.eps, step + 1, stream.native_handle());
    }
    const std::string at = what + " step " + std::to_string(step + 1);
    EXPECT_CLOSE(download(gp, stream), params[0].to_float_vector(), "p " + at);
    // The state too: an update is small next to p, so p alone would hide an error in it.
    const ParamSet state = opt->state();
    if (spec.kind == "adamw") {
      EXPECT_CLOSE(download(gm, stream), state.at("exp_avg.w").to_float_vector(), "m " + at);
      EXPECT_CLOSE(download(gv, stream), state.at("exp_avg_sq.w").to_float_vector(), "v " + at);
    } else if (spec.momentum != 0) {
      EXPECT_CLOSE(download(gbuf, stream), state.at("momentum.w").to_float_vector(), "buf " + at);
    }
  }
}
#endif

TEST(CudaKernels, SgdUpdateMatchesSgdStep) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  for (const std::int64_t n : kLengths) {
    expect_update_matches(sgd_spec(0.1, 0.0, 0.0, false), "plain", n);
    expect_update_matches(sgd_spec(0.1, 0.0, 0.01, false), "weight decay", n);
    expect_update_matches(sgd_spec(0.05, 0.9, 0.01, false), "momentum", n);
    expect_update_matches(sgd_spec(0.05, 0.9, 0.01, true), "nesterov", n);
  }
#endif
}

TEST(CudaKernels, AdamWUpdateMatchesAdamWStep) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  for (const std::int64_t n : kLengths) {
    expect_update_matches(adamw_spec(1e-3, 0.0, 0.9, 0.999, 1e-8), "adamw", n);
    expect_update_matches(adamw_spec(0.1, 0.0, 0.9, 0.999, 1e-8), "adamw large lr", n);
    expect_update_matches(adamw_spec(1e-2, 0.1, 0.8, 0.99, 1e-6), "adamw weight decay", n);
  }
#endif
}

}  // namespace
}  // namespace tandem::models
