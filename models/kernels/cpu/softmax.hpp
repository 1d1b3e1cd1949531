#pragma once

#include <cstdint>

// Row softmax over a row-major [rows, cols] matrix (the public Kernels' softmax; attention and
// cross-entropy keep their own fused ones).
namespace tandem::models::cpu {

// y[r, :] = exp(x[r, :] - max) / sum, so no row overflows; y may alias x.
void softmax_forward(const float* x, float* y, std::int64_t rows, std::int64_t cols);

// dx[r, :] = y[r, :] * (dy[r, :] - sum_c y[r, c] * dy[r, c]); dx may alias dy.
void softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows,
                      std::int64_t cols);

}  // namespace tandem::models::cpu
