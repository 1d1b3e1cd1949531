#pragma once

#include <cstdint>

// CUDA twins of models/kernels/cpu/reduce.hpp. Pointers are device memory; `stream` is the
// cudaStream_t of a cuda Stream (Stream::native_handle()), launched on the current device.
// Launch failures throw std::runtime_error naming the kernel; execution errors surface at the
// stream's next synchronisation.
namespace tandem::models::cuda {

// out[c] = alpha * sum_r x[r, c] + beta * out[c] over a row-major [rows, cols] matrix
// (beta = 0 never reads out). The summation order is fixed, so runs repeat bit for bit, though
// it is not the CPU kernel's order.
void column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
                float* out, void* stream);

// out[r] = max_c x[r, c] over a row-major [rows, cols] matrix with cols > 0.
void row_max(const float* x, std::int64_t rows, std::int64_t cols, float* out, void* stream);

// *out = sum_i x[i]^2, accumulated in double in a fixed order (one block: fixed strided
// subsets, then a fixed tree) and rounded to f32 once.
void sum_squares(const float* x, std::int64_t n, float* out, void* stream);

}  // namespace tandem::models::cuda
