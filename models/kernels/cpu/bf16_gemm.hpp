#pragma once

#include <cstdint>
#include <string>

#include "runtime/dtype.hpp"

namespace tandem::models::cpu {

// Whether this CPU runs bf16 products on native instructions (AVX512-BF16 or AMX), as oneDNN
// detects them. Where it does not, callers compute in f32 instead: oneDNN would emulate bf16
// there, slower than f32 and no more accurate.
bool bf16_gemm_native();

// bf16_gemm_native(), for callers about to fall back to f32 where it is false: the first such
// call in the process logs one warning saying so, later ones nothing.
bool bf16_gemm_native_or_warn();

// Row-major C[M, N] = alpha * op(A) * op(B) + beta * C with the layouts of gemm (gemm.hpp): bf16
// A and B, products accumulated in f32, C in f32. beta = 0 never reads C. Runs oneDNN's matmul,
// one primitive per shape made once and cached; threads as gemm does per GemmThreading
// (tbb_tiles: one tile per oneTBB worker, each on one OpenMP thread; blas_threads: one call on
// num_threads() OpenMP threads). Throws std::runtime_error naming the shape if oneDNN fails.
void bf16_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               float alpha, const BFloat16* a, std::int64_t lda, const BFloat16* b,
               std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// The oneDNN implementation that bf16_gemm runs for this whole, untiled product on one thread
// (e.g. "brg:avx512_core_bf16"): for benchmarks and tests, to see that it is not a reference one.
std::string bf16_gemm_impl(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                           std::int64_t k);

}  // namespace tandem::models::cpu
