#pragma once

#include <cstdint>

namespace tandem::models::cpu {

// Row-major C[M, N] = alpha * op(A) * op(B) + beta * C, op(A) is [M, K], op(B) is [K, N]; with
// trans_a, A is stored [K, M] (likewise B). beta = 0 never reads C. Uses all cores per
// GemmThreading (see threading.hpp).
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc);

// The same on the calling thread only: for small products inside parallel loops.
void gemm_serial(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                 float beta, float* c, std::int64_t ldc);

}  // namespace tandem::models::cpu
