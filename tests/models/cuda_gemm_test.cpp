// The cuBLAS GEMMs (models/kernels/cuda/gemm.hpp) and causal attention (attention.hpp) against
// the CPU kernels on random inputs, at each GemmPrecision with its own tolerance. Built in
// every configuration; every test skips with "no CUDA device" unless the backend is built and
// a GPU is present. Error norm and poisoning as in cuda_kernels_test.cpp (cuda_test_util.hpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device.hpp"
#include "tests/runtime/require_gpu.hpp"

#if TANDEM_HAVE_CUDA
#include <fmt/format.h>

#include "models/kernels/cpu/attention.hpp"
#include "models/kernels/cpu/gemm.hpp"
#include "models/kernels/cuda/attention.hpp"
#include "models/kernels/cuda/gemm.hpp"
#include "tests/models/cuda_test_util.hpp"
#endif

namespace tandem::models {
namespace {

#if TANDEM_HAVE_CUDA
using namespace cuda_test;  // NOLINT(google-build-using-namespace): test helpers only
using cuda::GemmPrecision;

// f32 differs from the CPU only in summation order; TF32 keeps 10 mantissa bits of each input
// and bf16 7, so their errors grow with those roundings (relative ~2^-11 and ~2^-8 per input).
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

struct GemmShape {
  std::int64_t m;
  std::int64_t n;
  std::int64_t k;
};

// Odd sizes that fill no tile evenly, a dot product of one, K longer than a tile, and K = 0.
const std::vector<GemmShape> kGemmShapes = {
    {1, 1, 1}, {37, 53, 29}, {64, 32, 128}, {130, 7, 257}, {5, 6, 0}};

// One GEMM's operands as stored: op(A) [m, k] and op(B) [k, n] kept transposed when asked,
// every leading dimension a few elements past the row so the ld arguments matter.
struct GemmCase {
  bool trans_a;
  bool trans_b;
  GemmShape s;
  std::int64_t a_rows() const { return trans_a ? s.k : s.m; }
  std::int64_t lda() const { return (trans_a ? s.m : s.k) + 3; }
  std::int64_t b_rows() const { return trans_b ? s.n : s.k; }
  std::int64_t ldb() const { return (trans_b ? s.k : s.n) + 2; }
  std::int64_t ldc() const { return s.n + 1; }
  std::int64_t a_size() const { return a_rows() * lda(); }
  std::int64_t b_size() const { return b_rows() * ldb(); }
  std::int64_t c_size() const { return s.m * ldc(); }
};

std::string label(const GemmCase& g, GemmPrecision p, float alpha, float beta) {
  return fmt::format("{} m={} n={} k={} trans_a={} trans_b={} alpha={} beta={}",
                     cuda::gemm_precision_name(p), g.s.m, g.s.n, g.s.k, g.trans_a, g.trans_b, alpha,
                     beta);
}

// The [m, n] block of a row-major matrix with leading dimension ld, at `offset`.
std::vector<float> block(const std::vector<float>& c, std::int64_t offset, std::int64_t m,
                         std::int64_t n, std::int64_t ld) {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(m * n));
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t col = 0; col < n; ++col) {
      out.push_back(c[static_cast<std::size_t>(offset + r * ld + col)]);
    }
  }
  return out;
}
#endif  // TANDEM_HAVE_CUDA

TEST(CudaKernels, GemmMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const GemmPrecision p : kPrecisions) {
    for (const GemmShape& s : kGemmShapes) {
      for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
          for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.75f, -1.5f}}) {
            // A single product plus beta * C can cancel to near zero, where the rounding of
            // the product's inputs (TF32, bf16) is no longer small against the result.
            if (p != GemmPrecision::f32 && s.k == 1 && beta != 0.0f) continue;
            const GemmCase g{ta, tb, s};
            const std::string what = label(g, p, alpha, beta);
            const std::vector<float> a = random_floats(g.a_size(), 21);
            const std::vector<float> b = random_floats(g.b_size(), 22);
            const std::vector<float> c0 = random_floats(g.c_size(), 23);
            std::vector<float> want = c0;
            cpu::gemm(ta, tb, s.m, s.n, s.k, alpha, a.data(), g.lda(), b.data(), g.ldb(), beta,
                      want.data(), g.ldc());
            const Tensor ga = upload(a);
            const Tensor gb = upload(b);
            // beta = 0 must not read C: poisoned, a read would show as NaN.
            Tensor gc = beta == 0.0f ? poisoned(g.c_size()) : upload(c0);
            cuda::gemm(ta, tb, s.m, s.n, s.k, alpha, dev(ga), g.lda(), dev(gb), g.ldb(), beta,
                       dev(gc), g.ldc(), p, stream.native_handle());
            const std::vector<float> got = download(gc, stream);
            EXPECT_LE(
                rel_error(block(got, 0, s.m, s.n, g.ldc()), block(want, 0, s.m, s.n, g.ldc())),
                tolerance(p))
                << what;
          }
        }
      }
    }
  }
#endif
}

TEST(CudaKernels, GemmStridedBatchedMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  constexpr std::int64_t kBatch = 3;
  for (const GemmPrecision p : kPrecisions) {
    for (const GemmShape& s : {GemmShape{37, 53, 29}, GemmShape{16, 16, 16}}) {
      for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
          // B shared by every product (stride 0, as a weight is) or one per product.
          for (const bool shared_b : {false, true}) {
            const float alpha = 1.25f;
            const float beta = shared_b ? 0.5f : 0.0f;
            const GemmCase g{ta, tb, s};
            const std::string what = label(g, p, alpha, beta) + (shared_b ? " shared B" : "");
            // Strides past each matrix, so a kernel that assumed packed operands would fail.
            const std::int64_t stride_a = g.a_size() + 5;
            const std::int64_t stride_b = shared_b ? 0 : g.b_size() + 7;
            const std::int64_t stride_c = g.c_size() + 2;
            const std::vector<float> a = random_floats(stride_a * kBatch, 24);
            const std::vector<float> b =
                random_floats(shared_b ? g.b_size() : stride_b * kBatch, 25);
            const std::vector<float> c0 = random_floats(stride_c * kBatch, 26);
            std::vector<float> want = c0;
            for (std::int64_t i = 0; i < kBatch; ++i) {
              cpu::gemm(ta, tb, s.m, s.n, s.k, alpha, a.data() + i * stride_a, g.lda(),
                        b.data() + i * stride_b, g.ldb(), beta, want.data() + i * stride_c,
                        g.ldc());
            }
            const Tensor ga = upload(a);
            const Tensor gb = upload(b);
            Tensor gc = beta == 0.0f ? poisoned(stride_c * kBatch) : upload(c0);
            cuda::gemm_strided_batched(ta, tb, s.m, s.n, s.k, alpha, dev(ga), g.lda(), stride_a,
                                       dev(gb), g.ldb(), stride_b, beta, dev(gc), g.ldc(), stride_c,
                                       kBatch, p, stream.native_handle());
            const std::vector<float> got = download(gc, stream);
            for (std::int64_t i = 0; i < kBatch; ++i) {
              EXPECT_LE(rel_error(block(got, i * stride_c, s.m, s.n, g.ldc()),
                                  block(want, i * stride_c, s.m, s.n, g.ldc())),
                        tolerance(p))
                  << what << " batch " << i;
            }
          }
        }
      }
    }
  }
#endif
}

#if TANDEM_HAVE_CUDA
struct AttentionShape {
  std::int64_t batch;
  std::int64_t seq;
  std::int64_t heads;
  std::int64_t d_head;
  std::int64_t qkv_size() const { return batch * seq * 3 * heads * d_head; }
  std::int64_t out_size() const { return batch * seq * heads * d_head; }
  std::int64_t probs_size() const { return batch * heads * seq * seq; }
};

// One position; odd sizes; sequences longer than the softmax's 256-thread rows.
const std::vector<AttentionShape> kAttentionShapes = {
    {1, 1, 1, 1}, {2, 7, 3, 5}, {2, 37, 4, 16}, {1, 300, 2, 32}};

std::string label(const AttentionShape& s, GemmPrecision p) {
  return fmt::format("{} batch={} seq={} heads={} d_head={}", cuda::gemm_precision_name(p), s.batch,
                     s.seq, s.heads, s.d_head);
}
#endif

TEST(CudaKernels, CausalAttentionForwardMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const GemmPrecision p : kPrecisions) {
    for (const AttentionShape& s : kAttentionShapes) {
      const std::string what = label(s, p);
      const std::vector<float> qkv = random_floats(s.qkv_size(), 31, -1.0f, 1.0f);
      std::vector<float> want_out(static_cast<std::size_t>(s.out_size()));
      std::vector<float> want_probs(static_cast<std::size_t>(s.probs_size()));
      cpu::causal_attention_forward(qkv.data(), want_out.data(), want_probs.data(), s.batch, s.seq,
                                    s.heads, s.d_head);
      const Tensor gqkv = upload(qkv);
      Tensor gout = poisoned(s.out_size());
      Tensor gprobs = poisoned(s.probs_size());
      cuda::causal_attention_forward(dev(gqkv), dev(gout), dev(gprobs), s.batch, s.seq, s.heads,
                                     s.d_head, p, stream.native_handle());
      EXPECT_LE(rel_error(download(gout, stream), want_out), tolerance(p)) << what << " out";
      EXPECT_LE(rel_error(download(gprobs, stream), want_probs), tolerance(p)) << what << " probs";
    }
  }
#endif
}

TEST(CudaKernels, CausalAttentionBackwardMatchesCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  Stream stream(Device::cuda(0));
  for (const GemmPrecision p : kPrecisions) {
    for (const AttentionShape& s : kAttentionShapes) {
      const std::string what = label(s, p);
      const std::vector<float> qkv = random_floats(s.qkv_size(), 32, -1.0f, 1.0f);
      const std::vector<float> dout = random_floats(s.out_size(), 33);
      // Both sides start from the CPU's probabilities, so this measures backward alone.
      std::vector<float> out(static_cast<std::size_t>(s.out_size()));
      std::vector<float> probs(static_cast<std::size_t>(s.probs_size()));
      cpu::causal_attention_forward(qkv.data(), out.data(), probs.data(), s.batch, s.seq, s.heads,
                                    s.d_head);
      std::vector<float> want(qkv.size());
      cpu::causal_attention_backward(qkv.data(), probs.data(), dout.data(), want.data(), s.batch,
                                     s.seq, s.heads, s.d_head);
      const Tensor gqkv = upload(qkv);
      const Tensor gprobs = upload(probs);
      const Tensor gdout = upload(dout);
      Tensor gdqkv = poisoned(s.qkv_size());
      // Scratch holds NaN too: backward must overwrite it before reading.
      Tensor scratch = poisoned(static_cast<std::int64_t>(
          cuda::causal_attention_scratch_bytes(s.seq, s.heads) / sizeof(float)));
      cuda::causal_attention_backward(dev(gqkv), dev(gprobs), dev(gdout), dev(gdqkv), s.batch,
                                      s.seq, s.heads, s.d_head, scratch.raw_data(), p,
                                      stream.native_handle());
      EXPECT_LE(rel_error(download(gdqkv, stream), want), tolerance(p)) << what;
    }
  }
#endif
}

}  // namespace
}  // namespace tandem::models
