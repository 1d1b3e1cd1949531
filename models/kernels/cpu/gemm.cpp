#include "models/kernels/cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>

#include "models/kernels/cpu/threading.hpp"

namespace tandem::models::cpu {
namespace {

// Below this many FLOPs a GEMM is not worth splitting across workers.
constexpr double kSplitFlops = 4.0e6;
// Tiles are multiples of this many rows/columns (keeps BLAS micro-kernels on full panels).
constexpr std::int64_t kTileAlign = 16;

void blas(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace

void gemm_serial(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                 float beta, float* c, std::int64_t ldc) {
  init_threading();
  blas(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  init_threading();
  const int workers = num_threads();
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (gemm_threading() == GemmThreading::blas_threads || workers <= 1 || flops < kSplitFlops) {
    blas(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split the larger of M and N: each tile then packs only its share of the larger operand.
  // The split depends only on the shapes and the worker count, so results are reproducible.
  const bool split_m = m >= n;
  const std::int64_t extent = split_m ? m : n;
  const std::int64_t units = (extent + kTileAlign - 1) / kTileAlign;
  const std::int64_t parts = std::min<std::int64_t>(workers, units);
  tbb::parallel_for(
      std::int64_t{0}, parts,
      [&](std::int64_t p) {
        const std::int64_t begin = std::min(extent, units * p / parts * kTileAlign);
        const std::int64_t end = std::min(extent, units * (p + 1) / parts * kTileAlign);
        if (begin >= end) return;
        if (split_m) {
          const float* ap = trans_a ? a + begin : a + begin * lda;
          blas(trans_a, trans_b, end - begin, n, k, alpha, ap, lda, b, ldb, beta, c + begin * ldc,
               ldc);
        } else {
          const float* bp = trans_b ? b + begin * ldb : b + begin;
          blas(trans_a, trans_b, m, end - begin, k, alpha, a, lda, bp, ldb, beta, c + begin, ldc);
        }
      },
      tbb::static_partitioner());
}

}  // namespace tandem::models::cpu
