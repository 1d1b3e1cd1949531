#include "models/kernels/cuda/launch.cuh"
#include "models/kernels/cuda/softmax.hpp"

namespace tandem::models::cuda {
namespace {

// One block per row: rows are at most a few thousand wide here (classes, sequence length), so
// a block-wide reduction per row keeps every SM busy once rows >= a few hundred.
__global__ void softmax_forward_kernel(const float* x, float* y, std::int64_t cols, bool causal) {
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  float* yr = y + r * cols;
  const std::int64_t valid = causal ? r % cols + 1 : cols;
  float mx = -INFINITY;
  for (std::int64_t c = threadIdx.x; c < valid; c += blockDim.x) mx = fmaxf(mx, xr[c]);
  mx = detail::block_max(mx, scratch);
  float sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < valid; c += blockDim.x) sum += expf(xr[c] - mx);
  const float inv = 1.0f / detail::block_sum(sum, scratch);
  // A thread reads and writes only its own columns, so y may alias x.
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    yr[c] = c < valid ? expf(xr[c] - mx) * inv : 0.0f;
  }
}

__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx,
                                        std::int64_t cols, bool causal) {
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x;
  const float* yr = y + r * cols;
  const float* dyr = dy + r * cols;
  float* dxr = dx + r * cols;
  const std::int64_t valid = causal ? r % cols + 1 : cols;
  float dot = 0.0f;
  for (std::int64_t c = threadIdx.x; c < valid; c += blockDim.x) dot += yr[c] * dyr[c];
  dot = detail::block_sum(dot, scratch);
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dxr[c] = c < valid ? yr[c] * (dyr[c] - dot) : 0.0f;
  }
}

constexpr int kRowBlock = 256;

}  // namespace

void softmax_forward(const float* x, float* y, std::int64_t rows, std::int64_t cols, bool causal,
                     void* stream) {
  if (rows <= 0 || cols <= 0) return;
  softmax_forward_kernel<<<static_cast<unsigned>(rows), kRowBlock, 0, detail::as_stream(stream)>>>(
      x, y, cols, causal);
  detail::check_launch("softmax_forward");
}

void softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows,
                      std::int64_t cols, bool causal, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  softmax_backward_kernel<<<static_cast<unsigned>(rows), kRowBlock, 0, detail::as_stream(stream)>>>(
      y, dy, dx, cols, causal);
  detail::check_launch("softmax_backward");
}

}  // namespace tandem::models::cuda
