// CUDA memory for tensors on cuda:N (allocation and copies only; kernels live in models/).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "runtime/detail/device_backend.hpp"

namespace tandem::detail {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA backend: ") + what +
                             " failed: " + cudaGetErrorString(status));
  }
}

class CudaBackend final : public DeviceBackend {
 public:
  int device_count() override {
    int count = 0;  // left unwritten when no driver is present
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return count;
  }

  void* allocate(std::size_t bytes, int index) override {
    const int count = device_count();
    if (index >= count) {
      throw std::runtime_error("CUDA backend: cannot allocate on cuda:" + std::to_string(index) +
                               ": " + std::to_string(count) + " GPU(s) visible");
    }
    check(cudaSetDevice(index), "cudaSetDevice");
    void* ptr = nullptr;
    check(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return ptr;
  }

  void deallocate(void* ptr, int index) noexcept override {
    if (cudaSetDevice(index) == cudaSuccess) cudaFree(ptr);
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            std::size_t bytes) override {
    cudaMemcpyKind kind = cudaMemcpyDefault;  // unified addressing resolves the direction
    if (dst_device.is_cuda()) {
      check(cudaSetDevice(dst_device.index()), "cudaSetDevice");
    } else if (src_device.is_cuda()) {
      check(cudaSetDevice(src_device.index()), "cudaSetDevice");
    }
    check(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy");
  }

  void set_zero(void* ptr, std::size_t bytes, int index) override {
    check(cudaSetDevice(index), "cudaSetDevice");
    check(cudaMemset(ptr, 0, bytes), "cudaMemset");
  }
};

}  // namespace

DeviceBackend* cuda_backend() {
  static CudaBackend backend;
  return &backend;
}

}  // namespace tandem::detail
