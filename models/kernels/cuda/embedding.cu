#include "models/kernels/cuda/embedding.hpp"
#include "models/kernels/cuda/launch.cuh"
#include "models/kernels/cuda/reduce.hpp"

namespace tandem::models::cuda {
namespace {

__global__ void embedding_forward_kernel(const std::int32_t* ids, const float* table,
                                         const float* pos, float* y, std::int64_t n,
                                         std::int64_t seq, std::int64_t vocab, std::int64_t dim) {
  const std::int64_t total = n * dim;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += stride) {
    const std::int64_t i = k / dim;
    const std::int64_t c = k % dim;
    const std::int32_t id = ids[i];
    if (id < 0 || id >= vocab) {
      y[k] = NAN;
      continue;
    }
    const float v = table[static_cast<std::int64_t>(id) * dim + c];
    y[k] = pos != nullptr ? v + pos[(i % seq) * dim + c] : v;
  }
}

__global__ void scale_kernel(float* x, std::int64_t n, float beta) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    x[i] = beta == 0.0f ? 0.0f : beta * x[i];
  }
}

__global__ void embedding_scatter_kernel(const std::int32_t* ids, const float* dy, float* dtable,
                                         std::int64_t n, std::int64_t vocab, std::int64_t dim,
                                         float alpha) {
  const std::int64_t total = n * dim;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += stride) {
    const std::int32_t id = ids[k / dim];
    if (id < 0 || id >= vocab) continue;
    atomicAdd(dtable + static_cast<std::int64_t>(id) * dim + k % dim, alpha * dy[k]);
  }
}

}  // namespace

void embedding_forward(const std::int32_t* ids, const float* table, const float* pos, float* y,
                       std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::int64_t dim,
                       void* stream) {
  const std::int64_t n = batch * seq;
  if (n <= 0 || dim <= 0) return;
  embedding_forward_kernel<<<detail::grid_for(n * dim), detail::kBlock, 0,
                             detail::as_stream(stream)>>>(ids, table, pos, y, n, seq, vocab, dim);
  detail::check_launch("embedding_forward");
}

void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable, float* dpos,
                        std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::int64_t dim,
                        float alpha, float beta, void* stream) {
  const std::int64_t n = batch * seq;
  if (dim <= 0) return;
  if (beta != 1.0f && vocab > 0) {
    scale_kernel<<<detail::grid_for(vocab * dim), detail::kBlock, 0, detail::as_stream(stream)>>>(
        dtable, vocab * dim, beta);
    detail::check_launch("embedding_backward (scale)");
  }
  if (n > 0) {
    embedding_scatter_kernel<<<detail::grid_for(n * dim), detail::kBlock, 0,
                               detail::as_stream(stream)>>>(ids, dy, dtable, n, vocab, dim, alpha);
    detail::check_launch("embedding_backward (scatter)");
  }
  // Sum over the batch of dy viewed as [batch, seq * dim].
  if (dpos != nullptr) column_sum(dy, batch, seq * dim, alpha, beta, dpos, stream);
}

}  // namespace tandem::models::cuda
