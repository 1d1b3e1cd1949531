#pragma once
// Column reductions over a row-major [rows, cols] matrix, shared by reduce.cu, activation.cu,
// layer_norm.cu and embedding.cu; CUDA builds only.
#include <cstdint>

#include "models/kernels/cuda/launch.cuh"

namespace tandem::models::cuda::detail {

inline constexpr int kTileCols = 32;
inline constexpr int kRowLanes = 16;

// out_k[c] = alpha * sum_r v_k(r, c) + beta * out_k[c] for the kOutputs values a functor yields
// per element. One block per 32 columns (a warp reads 32 consecutive floats of a row); each of
// its 16 row lanes sums every 16th row in order and the lanes are added in order: no atomics,
// so the result is the same on every run.
template <int kOutputs, class Value>
__global__ void column_reduce_kernel(Value value, std::int64_t rows, std::int64_t cols, float alpha,
                                     float beta, float* out0, float* out1) {
  __shared__ float partial[kOutputs][kRowLanes][kTileCols + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
  float acc[kOutputs] = {};
  if (c < cols) {
    for (std::int64_t r = threadIdx.y; r < rows; r += kRowLanes) {
      float v[kOutputs];
      value(r, c, v);
      for (int k = 0; k < kOutputs; ++k) acc[k] += v[k];
    }
  }
  for (int k = 0; k < kOutputs; ++k) partial[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float* outs[2] = {out0, out1};
  for (int k = 0; k < kOutputs; ++k) {
    float s = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) s += partial[k][lane][threadIdx.x];
    float* o = outs[k] + c;
    // beta == 0 never reads out: it may hold garbage (or NaN) on entry.
    *o = beta == 0.0f ? alpha * s : alpha * s + beta * *o;
  }
}

template <int kOutputs, class Value>
void column_reduce(Value value, std::int64_t rows, std::int64_t cols, float alpha, float beta,
                   float* out0, float* out1, void* stream, const char* kernel) {
  if (cols <= 0) return;
  const auto blocks = static_cast<unsigned>((cols + kTileCols - 1) / kTileCols);
  column_reduce_kernel<kOutputs><<<blocks, dim3(kTileCols, kRowLanes), 0, as_stream(stream)>>>(
      value, rows, cols, alpha, beta, out0, out1);
  check_launch(kernel);
}

struct MatrixValue {
  const float* x;
  std::int64_t cols;
  __device__ void operator()(std::int64_t r, std::int64_t c, float* v) const {
    v[0] = x[r * cols + c];
  }
};

}  // namespace tandem::models::cuda::detail
