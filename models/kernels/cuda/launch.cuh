#pragma once
// Shared by the .cu files of models/kernels/cuda; CUDA builds only. No fmt here: nvcc 13
// rejects fmt's consteval format strings, so messages are concatenated.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tandem::models::cuda::detail {

inline constexpr int kBlock = 256;
// Element-wise kernels loop grid-stride past this many blocks: enough to fill an H100 many
// times over, and n beyond 2^31 never overflows the grid size.
inline constexpr std::int64_t kMaxBlocks = 65535;

inline cudaStream_t as_stream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

inline unsigned grid_for(std::int64_t n, int block = kBlock) {
  return static_cast<unsigned>(std::min<std::int64_t>((n + block - 1) / block, kMaxBlocks));
}

// Launch errors (bad configuration, no device, a kernel image missing for this GPU) are only
// visible through cudaGetLastError; execution errors surface at the next synchronisation.
inline void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("cuda kernel ") + kernel +
                             ": launch failed: " + cudaGetErrorString(status));
  }
}

__device__ inline float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Block-wide sum or max for blockDim.x a multiple of 32 (at most 1024); every thread gets the
// result. `scratch` holds 32 floats; the trailing __syncthreads lets callers reuse it at once.
template <bool kMax>
__device__ inline float block_reduce(float v, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  r = kMax ? warp_max(r) : warp_sum(r);
  __syncthreads();
  return r;
}

__device__ inline float block_sum(float v, float* scratch) {
  return block_reduce<false>(v, scratch);
}
__device__ inline float block_max(float v, float* scratch) {
  return block_reduce<true>(v, scratch);
}

// The CPU kernels' fast_exp clamps its argument to [-86.5, 88]; clamping here too keeps the two
// equal where the exponential would overflow or flush to zero (gelu of large |x|).
__device__ inline float clamped_exp(float x) {
  return expf(fminf(fmaxf(x, -86.5f), 88.0f));
}

}  // namespace tandem::models::cuda::detail
