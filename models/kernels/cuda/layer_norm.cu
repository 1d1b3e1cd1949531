#include "models/kernels/cuda/column_reduce.cuh"
#include "models/kernels/cuda/launch.cuh"
#include "models/kernels/cuda/layer_norm.hpp"

namespace tandem::models::cuda {
namespace {

constexpr int kRowBlock = 256;

// One block per row, two passes over the row (mean, then the variance of x - mean) like the CPU
// kernel: the one-pass E[x^2] - mean^2 loses precision when |mean| >> std.
__global__ void layer_norm_forward_kernel(const float* x, const float* gamma, const float* beta,
                                          float* y, float* xhat, float* rstd, std::int64_t cols,
                                          float eps) {
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  float* hr = xhat + r * cols;
  float* yr = y + r * cols;
  const float n = static_cast<float>(cols);
  float s = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
  const float mean = detail::block_sum(s, scratch) / n;
  float ss = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = xr[c] - mean;
    ss += d * d;
  }
  const float rs = 1.0f / sqrtf(detail::block_sum(ss, scratch) / n + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float h = (xr[c] - mean) * rs;
    hr[c] = h;
    yr[c] = h * gamma[c] + beta[c];
  }
}

__global__ void layer_norm_backward_input_kernel(const float* dy, const float* xhat,
                                                 const float* rstd, const float* gamma, float* dx,
                                                 std::int64_t cols) {
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x;
  const float* dyr = dy + r * cols;
  const float* hr = xhat + r * cols;
  float* dxr = dx + r * cols;
  const float n = static_cast<float>(cols);
  float sg = 0.0f;
  float sgh = 0.0f;
  // __fmul_rn: the product rounded once, in both loops, so that nvcc cannot contract the second
  // loop's `g - mean_g` into an fma whose unrounded product differs from the rounded g summed
  // here (with one column, mean_g == g and dx must be exactly 0; the fma left rstd times the
  // product's rounding error, ~1e-6 with rstd = 316).
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = __fmul_rn(dyr[c], gamma[c]);
    sg += g;
    sgh += g * hr[c];
  }
  const float mean_g = detail::block_sum(sg, scratch) / n;
  const float mean_gh = detail::block_sum(sgh, scratch) / n;
  const float rs = rstd[r];
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dxr[c] = rs * (__fmul_rn(dyr[c], gamma[c]) - mean_g - hr[c] * mean_gh);
  }
}

struct WeightGradValue {
  const float* dy;
  const float* xhat;
  std::int64_t cols;
  __device__ void operator()(std::int64_t r, std::int64_t c, float* v) const {
    const float d = dy[r * cols + c];
    v[0] = d * xhat[r * cols + c];
    v[1] = d;
  }
};

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* xhat, float* rstd, std::int64_t rows, std::int64_t cols, float eps,
                        void* stream) {
  if (rows <= 0 || cols <= 0) return;
  layer_norm_forward_kernel<<<static_cast<unsigned>(rows), kRowBlock, 0,
                              detail::as_stream(stream)>>>(x, gamma, beta, y, xhat, rstd, cols,
                                                           eps);
  detail::check_launch("layer_norm_forward");
}

void layer_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                               const float* gamma, float* dx, std::int64_t rows, std::int64_t cols,
                               void* stream) {
  if (rows <= 0 || cols <= 0) return;
  layer_norm_backward_input_kernel<<<static_cast<unsigned>(rows), kRowBlock, 0,
                                     detail::as_stream(stream)>>>(dy, xhat, rstd, gamma, dx, cols);
  detail::check_launch("layer_norm_backward_input");
}

void layer_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                std::int64_t rows, std::int64_t cols, float alpha, float beta,
                                void* stream) {
  detail::column_reduce<2>(WeightGradValue{dy, xhat, cols}, rows, cols, alpha, beta, dgamma, dbeta,
                           stream, "layer_norm_backward_weight");
}

}  // namespace tandem::models::cuda
