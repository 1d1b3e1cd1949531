#include "models/kernels/cuda/launch.cuh"
#include "models/kernels/cuda/pointwise_loss.hpp"

namespace tandem::models::cuda {
namespace {

constexpr int kSumBlock = 256;

__global__ void pointwise_loss_kernel(PointwiseLoss loss, const float* x, const float* t,
                                      std::int64_t n, float* dx, float scale, double* each) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double xi = x[i];
    const double ti = t[i];
    double l = 0.0;
    double g = 0.0;
    if (loss == PointwiseLoss::squared_error) {
      // In double like the CPU's loop, so both devices give the same gradient.
      const double d = xi - ti;
      l = d * d;
      g = 2.0 * d;
    } else if (ti >= 0.0 && ti <= 1.0) {
      const double e = exp(-fabs(xi));
      const double sigmoid = xi >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
      l = fmax(xi, 0.0) - xi * ti + log1p(e);
      g = static_cast<double>(static_cast<float>(sigmoid - ti));
    } else {
      l = NAN;
      g = NAN;
    }
    each[i] = l;
    dx[i] = scale * static_cast<float>(g);
  }
}

// One block: each thread a fixed strided subset in order, then a fixed tree.
template <typename T>
__global__ void sum_kernel(const T* values, std::int64_t n, CrossEntropySums* sums) {
  __shared__ double part[kSumBlock];
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += kSumBlock) s += static_cast<double>(values[i]);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int half = kSumBlock / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums->loss_sum = part[0];
    sums->correct = 0;
  }
}

}  // namespace

std::size_t pointwise_loss_scratch_bytes(std::int64_t n) {
  return static_cast<std::size_t>(n > 0 ? n : 0) * sizeof(double);
}

void pointwise_loss(PointwiseLoss loss, const float* x, const float* t, std::int64_t n, float* dx,
                    float scale, CrossEntropySums* sums, void* scratch, void* stream) {
  auto* each = static_cast<double*>(scratch);
  if (n > 0) {
    pointwise_loss_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(
        loss, x, t, n, dx, scale, each);
    detail::check_launch("pointwise_loss");
  }
  // Launched even for no elements: *sums is always written.
  sum_kernel<double><<<1, kSumBlock, 0, detail::as_stream(stream)>>>(each, n > 0 ? n : 0, sums);
  detail::check_launch("pointwise_loss (sum)");
}

void sum_losses(const float* values, std::int64_t n, CrossEntropySums* sums, void* stream) {
  sum_kernel<float><<<1, kSumBlock, 0, detail::as_stream(stream)>>>(values, n > 0 ? n : 0, sums);
  detail::check_launch("sum_losses");
}

}  // namespace tandem::models::cuda
