#pragma once

#include <cstdint>

// CUDA twins of models/kernels/cpu/layer_norm.hpp: the same arguments in the same order, then
// the stream (a cudaStream_t from Stream::native_handle()). Pointers are device memory.
// Launch failures throw std::runtime_error naming the kernel.
namespace tandem::models::cuda {

// Row-wise layer norm of x [rows, cols]: xhat = (x - mean) * rstd, y = xhat * gamma + beta.
// Keeps xhat [rows, cols] and rstd [rows] for backward, as the CPU kernel does.
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* xhat, float* rstd, std::int64_t rows, std::int64_t cols, float eps,
                        void* stream);

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
void layer_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                               const float* gamma, float* dx, std::int64_t rows, std::int64_t cols,
                               void* stream);

// dgamma = alpha * sum_r dy * xhat + b * dgamma; dbeta = alpha * sum_r dy + b * dbeta
// (b = 0 never reads them).
void layer_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                std::int64_t rows, std::int64_t cols, float alpha, float beta,
                                void* stream);

}  // namespace tandem::models::cuda
