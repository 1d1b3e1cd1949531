#include "models/kernels/cuda/cross_entropy.hpp"
#include "models/kernels/cuda/launch.cuh"

namespace tandem::models::cuda {
namespace {

constexpr int kRowBlock = 256;
constexpr int kSumBlock = 256;

// One block per row: the row's loss (in double, as the CPU kernel sums it), whether its first
// maximum is the target, and the gradient.
__global__ void cross_entropy_rows_kernel(const float* logits, const std::int32_t* targets,
                                          std::int64_t classes, float* dlogits, float scale,
                                          double* row_loss, std::int32_t* row_correct) {
  __shared__ float scratch[32];
  __shared__ int first[32];
  const std::int64_t r = blockIdx.x;
  const float* z = logits + r * classes;
  const std::int32_t t = targets[r];
  if (t < 0 || t >= classes) {
    if (dlogits != nullptr) {
      for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x)
        dlogits[r * classes + c] = NAN;
    }
    if (threadIdx.x == 0) {
      row_loss[r] = NAN;
      row_correct[r] = 0;
    }
    return;
  }
  float mx = -INFINITY;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) mx = fmaxf(mx, z[c]);
  mx = detail::block_max(mx, scratch);
  // The first index holding the maximum, as the CPU's argmax takes it.
  int arg = static_cast<int>(classes);
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    if (z[c] == mx) {
      arg = static_cast<int>(c);
      break;
    }
  }
  arg = __reduce_min_sync(0xffffffffu, arg);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  if (lane == 0) first[warp] = arg;
  float sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) sum += expf(z[c] - mx);
  sum = detail::block_sum(sum, scratch);  // its __syncthreads also publishes first[]
  if (dlogits != nullptr) {
    const float inv = scale / sum;
    float* d = dlogits + r * classes;
    for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      const float g = expf(z[c] - mx) * inv;
      d[c] = c == t ? g - scale : g;
    }
  }
  if (threadIdx.x == 0) {
    int a = first[0];
    for (int w = 1; w < static_cast<int>(blockDim.x) >> 5; ++w) a = min(a, first[w]);
    row_loss[r] = static_cast<double>(logf(sum)) - static_cast<double>(z[t] - mx);
    row_correct[r] = a == t ? 1 : 0;
  }
}

// One block adds the per-row results: each thread a fixed strided subset in order, then a
// fixed tree, so the total does not depend on scheduling.
__global__ void cross_entropy_sum_kernel(const double* row_loss, const std::int32_t* row_correct,
                                         std::int64_t rows, CrossEntropySums* sums) {
  __shared__ double loss[kSumBlock];
  __shared__ long long correct[kSumBlock];
  double l = 0.0;
  long long k = 0;
  for (std::int64_t r = threadIdx.x; r < rows; r += kSumBlock) {
    l += row_loss[r];
    k += row_correct[r];
  }
  loss[threadIdx.x] = l;
  correct[threadIdx.x] = k;
  __syncthreads();
  for (int half = kSumBlock / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) {
      loss[threadIdx.x] += loss[threadIdx.x + half];
      correct[threadIdx.x] += correct[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums->loss_sum = loss[0];
    sums->correct = correct[0];
  }
}

std::size_t loss_bytes(std::int64_t rows) {
  return static_cast<std::size_t>(rows > 0 ? rows : 0) * sizeof(double);
}

}  // namespace

std::size_t cross_entropy_scratch_bytes(std::int64_t rows) {
  return loss_bytes(rows) + static_cast<std::size_t>(rows > 0 ? rows : 0) * sizeof(std::int32_t);
}

void cross_entropy(const float* logits, const std::int32_t* targets, std::int64_t rows,
                   std::int64_t classes, float* dlogits, float scale, CrossEntropySums* sums,
                   void* scratch, void* stream) {
  auto* row_loss = static_cast<double*>(scratch);
  auto* row_correct =
      reinterpret_cast<std::int32_t*>(static_cast<char*>(scratch) + loss_bytes(rows));
  if (rows > 0 && classes > 0) {
    cross_entropy_rows_kernel<<<static_cast<unsigned>(rows), kRowBlock, 0,
                                detail::as_stream(stream)>>>(logits, targets, classes, dlogits,
                                                             scale, row_loss, row_correct);
    detail::check_launch("cross_entropy (rows)");
  }
  // Launched even for no rows: *sums is always written.
  cross_entropy_sum_kernel<<<1, kSumBlock, 0, detail::as_stream(stream)>>>(
      row_loss, row_correct, classes > 0 ? rows : 0, sums);
  detail::check_launch("cross_entropy (sum)");
}

}  // namespace tandem::models::cuda
