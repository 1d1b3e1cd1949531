#pragma once
// Shared by the CUDA translation units (cuda_backend.cu, cuda_stream.cu); CUDA builds only.
// No fmt here: nvcc 13 rejects fmt 9's consteval format strings, so messages are concatenated.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace tandem::detail {

inline void cuda_check(cudaError_t status, const char* what, int index) {
  if (status != cudaSuccess) {
    throw std::runtime_error("CUDA on cuda:" + std::to_string(index) + ": " + what +
                             " failed: " + cudaGetErrorString(status));
  }
}

// Makes cuda:index current for a scope and restores the caller's device: the current device is
// per-thread state that kernels launched by models/ on the same worker rely on.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int index) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != index) cuda_check(cudaSetDevice(index), "cudaSetDevice", index);
  }
  ~CudaDeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace tandem::detail
