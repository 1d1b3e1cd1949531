#include "models/kernels/cuda/dropout.hpp"
#include "models/kernels/cuda/launch.cuh"

namespace tandem::models::cuda {
namespace {

// Device copies of runtime/counter_rng.hpp's splitmix64, counter_hash and counter_uniform_f32
// (those are host functions). They must stay identical: CudaKernels.DropoutMatchesCpu compares
// the masks exactly.
__device__ inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__device__ inline float counter_uniform_f32(std::uint64_t key, std::uint64_t counter) {
  const std::uint64_t h = splitmix64(key ^ splitmix64(counter + 0x632be59bd9b4e019ULL));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

__global__ void dropout_kernel(const float* x, float* y, std::int64_t n, float p, float keep_scale,
                               std::uint64_t key, std::uint64_t base) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float u = counter_uniform_f32(key, base + static_cast<std::uint64_t>(i));
    // __fmul_rn: one rounded product, as on the CPU, never contracted into something else.
    y[i] = u >= p ? __fmul_rn(x[i], keep_scale) : 0.0f;
  }
}

}  // namespace

void dropout_apply(const float* x, float* y, std::int64_t samples, std::int64_t per_sample, float p,
                   std::uint64_t key, std::int64_t first_sample, void* stream) {
  const std::int64_t n = samples * per_sample;
  if (n <= 0) return;
  // Computed on the host as the CPU does, so both scale by the same float.
  const float keep_scale = 1.0f / (1.0f - p);
  const auto base = static_cast<std::uint64_t>(first_sample * per_sample);
  dropout_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(
      x, y, n, p, keep_scale, key, base);
  detail::check_launch("dropout_apply");
}

}  // namespace tandem::models::cuda
