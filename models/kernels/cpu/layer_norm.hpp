#pragma once

#include <cstdint>

namespace tandem::models::cpu {

// Row-wise layer norm of x [rows, cols]: xhat = (x - mean) * rstd, y = xhat * gamma + beta.
// Keeps xhat [rows, cols] and rstd [rows] for backward.
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* xhat, float* rstd, std::int64_t rows, std::int64_t cols, float eps);

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
void layer_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                               const float* gamma, float* dx, std::int64_t rows, std::int64_t cols);

// dgamma = alpha * sum_r dy * xhat + b * dgamma; dbeta = alpha * sum_r dy + b * dbeta.
void layer_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                std::int64_t rows, std::int64_t cols, float alpha, float beta);

}  // namespace tandem::models::cpu
