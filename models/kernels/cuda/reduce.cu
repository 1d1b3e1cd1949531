#include "models/kernels/cuda/column_reduce.cuh"
#include "models/kernels/cuda/launch.cuh"
#include "models/kernels/cuda/reduce.hpp"

namespace tandem::models::cuda {
namespace {

// One block per row (grid-stride over rows), as row_sum.
__global__ void row_max_kernel(const float* x, std::int64_t rows, std::int64_t cols, float* out) {
  __shared__ float scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = x + r * cols;
    float m = -INFINITY;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = detail::block_max(m, scratch);
    if (threadIdx.x == 0) out[r] = m;
  }
}

constexpr int kSquaresBlock = 256;

__global__ void sum_squares_kernel(const float* x, std::int64_t n, float* out) {
  __shared__ double part[kSquaresBlock];
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += kSquaresBlock) {
    const double v = x[i];
    s += v * v;
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int half = kSquaresBlock / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = static_cast<float>(part[0]);
}

}  // namespace

void sum_squares(const float* x, std::int64_t n, float* out, void* stream) {
  sum_squares_kernel<<<1, kSquaresBlock, 0, detail::as_stream(stream)>>>(x, n > 0 ? n : 0, out);
  detail::check_launch("sum_squares");
}

void column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
                float* out, void* stream) {
  detail::column_reduce<1>(detail::MatrixValue{x, cols}, rows, cols, alpha, beta, out, nullptr,
                           stream, "column_sum");
}

void row_max(const float* x, std::int64_t rows, std::int64_t cols, float* out, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  const unsigned grid = static_cast<unsigned>(std::min<std::int64_t>(rows, detail::kMaxBlocks));
  row_max_kernel<<<grid, detail::kBlock, 0, detail::as_stream(stream)>>>(x, rows, cols, out);
  detail::check_launch("row_max");
}

}  // namespace tandem::models::cuda
