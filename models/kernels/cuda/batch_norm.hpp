#pragma once

#include <cstdint>

// CUDA twins of models/kernels/cpu/batch_norm.hpp: the same arguments in the same order, then
// the stream (a cudaStream_t from Stream::native_handle()). Pointers are device memory. The
// per-channel sums run in f32 across a block (the CPU's in double), so results agree to
// rounding, not bit for bit. Launch failures throw std::runtime_error naming the kernel.
namespace tandem::models::cuda {

void batch_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* xhat, float* rstd, float* sums, std::int64_t n, std::int64_t c,
                        std::int64_t hw, float eps, void* stream);
void batch_norm_inference(const float* x, const float* gamma, const float* beta, const float* mean,
                          const float* var, float* y, std::int64_t n, std::int64_t c,
                          std::int64_t hw, float eps, void* stream);
void batch_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                               const float* gamma, float* dx, std::int64_t n, std::int64_t c,
                               std::int64_t hw, void* stream);
void batch_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                std::int64_t n, std::int64_t c, std::int64_t hw, float alpha,
                                float beta, void* stream);
void batch_norm_update_running(const float* sum, const float* sum_sq, const float* count,
                               const float* mean, const float* var, const float* updates,
                               float* mean_out, float* var_out, float* updates_out, std::int64_t c,
                               float momentum, void* stream);

}  // namespace tandem::models::cuda
