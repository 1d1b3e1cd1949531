#include "models/kernels/cuda/batch_norm.hpp"
#include "models/kernels/cuda/launch.cuh"

namespace tandem::models::cuda {
namespace {

// One block per channel; a channel's m = n * hw elements are at (i * c + ch) * hw + e.
__device__ inline std::int64_t at(std::int64_t k, std::int64_t ch, std::int64_t c,
                                  std::int64_t hw) {
  return ((k / hw) * c + ch) * hw + k % hw;
}

// Two passes like the CPU (mean, then the variance of x - mean): E[x^2] - mean^2 cancels.
__global__ void batch_norm_forward_kernel(const float* x, const float* gamma, const float* beta,
                                          float* y, float* xhat, float* rstd, float* sums,
                                          std::int64_t n, std::int64_t c, std::int64_t hw,
                                          float eps) {
  __shared__ float scratch[32];
  const std::int64_t ch = blockIdx.x;
  const std::int64_t m = n * hw;
  float s = 0.0f;
  float q = 0.0f;
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const float v = x[at(k, ch, c, hw)];
    s += v;
    q += v * v;
  }
  s = detail::block_sum(s, scratch);
  q = detail::block_sum(q, scratch);
  const float mean = m > 0 ? s / static_cast<float>(m) : 0.0f;
  float d2 = 0.0f;
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const float d = x[at(k, ch, c, hw)] - mean;
    d2 += d * d;
  }
  d2 = detail::block_sum(d2, scratch);
  const float var = m > 0 ? d2 / static_cast<float>(m) : 0.0f;
  const float r = 1.0f / sqrtf(var + eps);
  if (threadIdx.x == 0) {
    rstd[ch] = r;
    sums[ch] = s;
    sums[c + ch] = q;
    if (ch == 0) sums[2 * c] = static_cast<float>(m);
  }
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const std::int64_t i = at(k, ch, c, hw);
    const float h = (x[i] - mean) * r;
    xhat[i] = h;
    y[i] = gamma[ch] * h + beta[ch];
  }
}

__global__ void batch_norm_inference_kernel(const float* x, const float* gamma, const float* beta,
                                            const float* mean, const float* var, float* y,
                                            std::int64_t n, std::int64_t c, std::int64_t hw,
                                            float eps) {
  const std::int64_t total = n * c * hw;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t ch = (i / hw) % c;
    const float r = static_cast<float>(1.0 / sqrt(static_cast<double>(var[ch]) + eps));
    y[i] = gamma[ch] * ((x[i] - mean[ch]) * r) + beta[ch];
  }
}

__global__ void batch_norm_backward_input_kernel(const float* dy, const float* xhat,
                                                 const float* rstd, const float* gamma, float* dx,
                                                 std::int64_t n, std::int64_t c, std::int64_t hw) {
  __shared__ float scratch[32];
  const std::int64_t ch = blockIdx.x;
  const std::int64_t m = n * hw;
  float sd = 0.0f;
  float sdx = 0.0f;
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const std::int64_t i = at(k, ch, c, hw);
    sd += dy[i];
    sdx += dy[i] * xhat[i];
  }
  sd = detail::block_sum(sd, scratch);
  sdx = detail::block_sum(sdx, scratch);
  const float mean_dy = m > 0 ? sd / static_cast<float>(m) : 0.0f;
  const float mean_dyx = m > 0 ? sdx / static_cast<float>(m) : 0.0f;
  const float scale = gamma[ch] * rstd[ch];
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const std::int64_t i = at(k, ch, c, hw);
    dx[i] = scale * (dy[i] - mean_dy - xhat[i] * mean_dyx);
  }
}

__global__ void batch_norm_backward_weight_kernel(const float* dy, const float* xhat, float* dgamma,
                                                  float* dbeta, std::int64_t n, std::int64_t c,
                                                  std::int64_t hw, float alpha, float beta) {
  __shared__ float scratch[32];
  const std::int64_t ch = blockIdx.x;
  const std::int64_t m = n * hw;
  float sd = 0.0f;
  float sdx = 0.0f;
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const std::int64_t i = at(k, ch, c, hw);
    sd += dy[i];
    sdx += dy[i] * xhat[i];
  }
  sd = detail::block_sum(sd, scratch);
  sdx = detail::block_sum(sdx, scratch);
  if (threadIdx.x == 0) {
    // beta 0 writes without reading (the sink may hold NaN).
    dgamma[ch] = beta == 0.0f ? alpha * sdx : alpha * sdx + beta * dgamma[ch];
    dbeta[ch] = beta == 0.0f ? alpha * sd : alpha * sd + beta * dbeta[ch];
  }
}

// One thread per channel. count is only read; the number of updates has its own slot.
__global__ void batch_norm_update_running_kernel(const float* sum, const float* sum_sq,
                                                 const float* count, const float* mean,
                                                 const float* var, const float* updates,
                                                 float* mean_out, float* var_out,
                                                 float* updates_out, std::int64_t c,
                                                 float momentum) {
  const std::int64_t ch = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const float m = count[0];
  if (ch < c) {
    if (!(m > 0.0f)) {
      mean_out[ch] = mean[ch];
      var_out[ch] = var[ch];
    } else {
      const float correction = m > 1.0f ? m / (m - 1.0f) : 1.0f;
      const float mb = sum[ch] / m;
      const float vb = (sum_sq[ch] / m - mb * mb) * correction;
      mean_out[ch] = (1.0f - momentum) * mean[ch] + momentum * mb;
      var_out[ch] = (1.0f - momentum) * var[ch] + momentum * vb;
    }
  }
  if (ch == 0) updates_out[0] = m > 0.0f ? updates[0] + 1.0f : updates[0];
}

}  // namespace

void batch_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* xhat, float* rstd, float* sums, std::int64_t n, std::int64_t c,
                        std::int64_t hw, float eps, void* stream) {
  if (c <= 0) return;
  batch_norm_forward_kernel<<<static_cast<unsigned>(c), detail::kBlock, 0,
                              detail::as_stream(stream)>>>(x, gamma, beta, y, xhat, rstd, sums, n,
                                                           c, hw, eps);
  detail::check_launch("batch_norm_forward");
}

void batch_norm_inference(const float* x, const float* gamma, const float* beta, const float* mean,
                          const float* var, float* y, std::int64_t n, std::int64_t c,
                          std::int64_t hw, float eps, void* stream) {
  const std::int64_t total = n * c * hw;
  if (total <= 0) return;
  batch_norm_inference_kernel<<<detail::grid_for(total), detail::kBlock, 0,
                                detail::as_stream(stream)>>>(x, gamma, beta, mean, var, y, n, c, hw,
                                                             eps);
  detail::check_launch("batch_norm_inference");
}

void batch_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                               const float* gamma, float* dx, std::int64_t n, std::int64_t c,
                               std::int64_t hw, void* stream) {
  if (c <= 0 || n * hw <= 0) return;
  batch_norm_backward_input_kernel<<<static_cast<unsigned>(c), detail::kBlock, 0,
                                     detail::as_stream(stream)>>>(dy, xhat, rstd, gamma, dx, n, c,
                                                                  hw);
  detail::check_launch("batch_norm_backward_input");
}

void batch_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                std::int64_t n, std::int64_t c, std::int64_t hw, float alpha,
                                float beta, void* stream) {
  if (c <= 0) return;
  batch_norm_backward_weight_kernel<<<static_cast<unsigned>(c), detail::kBlock, 0,
                                      detail::as_stream(stream)>>>(dy, xhat, dgamma, dbeta, n, c,
                                                                   hw, alpha, beta);
  detail::check_launch("batch_norm_backward_weight");
}

void batch_norm_update_running(const float* sum, const float* sum_sq, const float* count,
                               const float* mean, const float* var, const float* updates,
                               float* mean_out, float* var_out, float* updates_out, std::int64_t c,
                               float momentum, void* stream) {
  const std::int64_t threads = c > 0 ? c : 1;
  batch_norm_update_running_kernel<<<detail::grid_for(threads), detail::kBlock, 0,
                                     detail::as_stream(stream)>>>(
      sum, sum_sq, count, mean, var, updates, mean_out, var_out, updates_out, c, momentum);
  detail::check_launch("batch_norm_update_running");
}

}  // namespace tandem::models::cuda
