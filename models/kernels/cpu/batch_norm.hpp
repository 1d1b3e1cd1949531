#pragma once

#include <cstdint>

namespace tandem::models::cpu {

// Batch normalisation over NCHW tensors [n, c, hw]: each channel's statistics run over its
// m = n * hw elements. Every sum is taken in double, in element order, so that a channel's
// result does not depend on threading.

// Training: mean and biased variance of the batch, rstd = 1 / sqrt(var + eps) [c],
// xhat = (x - mean) * rstd, y = gamma * xhat + beta. sums [2c + 1] gets, per channel, sum x,
// then sum x^2, then m once: what a running-statistics update needs from this batch.
void batch_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* xhat, float* rstd, float* sums, std::int64_t n, std::int64_t c,
                        std::int64_t hw, float eps);

// Evaluation: y = gamma * (x - mean) / sqrt(var + eps) + beta with given (running) statistics.
void batch_norm_inference(const float* x, const float* gamma, const float* beta, const float* mean,
                          const float* var, float* y, std::int64_t n, std::int64_t c,
                          std::int64_t hw, float eps);

// dx = gamma * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), means per channel.
void batch_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                               const float* gamma, float* dx, std::int64_t n, std::int64_t c,
                               std::int64_t hw);

// dgamma = alpha * sum dy * xhat + beta * dgamma; dbeta = alpha * sum dy + beta * dbeta (per
// channel; beta 0 writes without reading).
void batch_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                std::int64_t n, std::int64_t c, std::int64_t hw, float alpha,
                                float beta);

// Running statistics from the sums of the batches since the last update (sum [c], sum_sq [c],
// count [1], as batch_norm_forward writes them, added over slices): mean_b = sum / count,
// var_b = (sum_sq / count - mean_b^2) * count / (count - 1) (unbiased, as PyTorch; no correction
// for count 1), out = (1 - momentum) * running + momentum * stat, updates_out = updates + 1.
// count <= 0 (no sample seen) leaves the statistics and the count as they are. The outputs may
// alias the inputs.
void batch_norm_update_running(const float* sum, const float* sum_sq, const float* count,
                               const float* mean, const float* var, const float* updates,
                               float* mean_out, float* var_out, float* updates_out, std::int64_t c,
                               float momentum);

}  // namespace tandem::models::cpu
