#pragma once

#include <cstdint>

namespace tandem::models::cpu {

// out[c] = alpha * sum_r x[r, c] + beta * out[c] over a row-major [rows, cols] matrix
// (beta = 0 never reads out). Rows are summed in fixed chunks whose partial sums are added in
// order, so the result does not depend on the number of threads.
void column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
                float* out);

// out[r] = max_c x[r, c] over a row-major [rows, cols] matrix with cols > 0.
void row_max(const float* x, std::int64_t rows, std::int64_t cols, float* out);

// Row count of the fixed chunks column reductions use (exposed for kernels that fuse their
// own per-chunk work with a column sum).
inline constexpr std::int64_t kReduceRows = 128;

// Combines per-chunk partial column sums [chunks, cols]: out = alpha * sum + beta * out.
void combine_partials(const float* partials, std::int64_t chunks, std::int64_t cols, float alpha,
                      float beta, float* out);

// sum_i x[i]^2 over n floats, accumulated in f64 over fixed chunks whose partial sums are added
// in order (the result does not depend on the number of threads), rounded to f32 once.
float sum_squares(const float* x, std::int64_t n);

}  // namespace tandem::models::cpu
