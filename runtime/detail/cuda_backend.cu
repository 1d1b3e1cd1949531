// CUDA memory for tensors on cuda:N (allocation and copies; kernels live in models/), and the
// factory of CUDA streams (cuda_stream.cu).
#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "runtime/detail/caching_allocator.hpp"
#include "runtime/detail/cuda_stream.hpp"
#include "runtime/detail/cuda_util.hpp"
#include "runtime/detail/device_backend.hpp"

namespace tandem::detail {
namespace {

constexpr int kMaxDevices = 64;

// cudaMalloc and cudaFree synchronise the device and cost tens of microseconds to milliseconds;
// per tensor, they dominated a training step. The caching allocator calls them during the first
// step only. Out of memory comes back as nullptr so the allocator can release its cache and
// retry.
CachingAllocator::SystemOps device_ops(int index) {
  return {
      [index](std::size_t bytes) -> void* {
        CudaDeviceGuard guard(index);
        void* p = nullptr;
        const cudaError_t status = cudaMalloc(&p, bytes);
        if (status == cudaErrorMemoryAllocation) {
          cudaGetLastError();  // not sticky: clear it so later calls do not report it
          return nullptr;
        }
        cuda_check(status, "cudaMalloc", index);
        return p;
      },
      [index](void* p) {
        if (cudaSetDevice(index) == cudaSuccess) cudaFree(p);
      },
  };
}

// cudaHostAlloc is slower still (it page-locks every page), so staging buffers are cached too.
// Portable: the pages are pinned for every device, since one buffer may stage for several.
CachingAllocator::SystemOps pinned_ops() {
  return {
      [](std::size_t bytes) -> void* {
        void* p = nullptr;
        const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
        if (status == cudaErrorMemoryAllocation) {
          cudaGetLastError();
          return nullptr;
        }
        cuda_check(status, "cudaHostAlloc", -1);
        return p;
      },
      [](void* p) { cudaFreeHost(p); },
  };
}

class CudaBackend final : public DeviceBackend {
 public:
  int device_count() override {
    // The set of visible devices is fixed for the life of the process.
    std::call_once(count_once_, [this] {
      int count = 0;  // left unwritten when no driver is present
      if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        count = 0;
      }
      count_ = count < kMaxDevices ? count : kMaxDevices;
    });
    return count_;
  }

  void* allocate(std::size_t bytes, int index) override {
    return allocator(index, "allocate").allocate(bytes);
  }

  void deallocate(void* ptr, int index) noexcept override {
    // The index was checked when ptr was allocated, so the allocator exists.
    allocators_[static_cast<std::size_t>(index)]->deallocate(ptr);
  }

  DeviceMemoryStats memory_stats(int index) override {
    return allocator(index, "device_memory_stats").stats();
  }

  std::size_t release_cached(int index) override {
    return allocator(index, "release_cached_memory").release_cached();
  }

  void reset_peak(int index) override { allocator(index, "reset_peak_memory").reset_peak(); }

  void* allocate_pinned(std::size_t bytes) override {
    if (device_count() == 0) return nullptr;
    std::call_once(pinned_once_, [this] {
      pinned_ = std::make_unique<CachingAllocator>("pinned host memory", pinned_ops());
    });
    return pinned_->allocate(bytes);
  }

  void deallocate_pinned(void* ptr) noexcept override { pinned_->deallocate(ptr); }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            std::size_t bytes) override {
    const int index = dst_device.is_cuda() ? dst_device.index() : src_device.index();
    CudaDeviceGuard guard(index);
    // Unified addressing resolves the direction.
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy", index);
    // cudaMemcpy between device buffers returns before the copy has run; Stream's non-blocking
    // streams do not order themselves after the legacy stream, so "synchronous" must mean it.
    cuda_check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize", index);
  }

  void set_zero(void* ptr, std::size_t bytes, int index) override {
    CudaDeviceGuard guard(index);
    cuda_check(cudaMemset(ptr, 0, bytes), "cudaMemset", index);
    // cudaMemset of device memory returns before it has run (see copy above).
    cuda_check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize", index);
  }

  void copy_async(void* dst, Device, const void* src, Device, std::size_t bytes,
                  void* native_stream, int stream_index) override {
    CudaDeviceGuard guard(stream_index);
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                               static_cast<cudaStream_t>(native_stream)),
               "cudaMemcpyAsync", stream_index);
  }

  void set_zero_async(void* ptr, std::size_t bytes, void* native_stream,
                      int stream_index) override {
    CudaDeviceGuard guard(stream_index);
    cuda_check(cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(native_stream)),
               "cudaMemsetAsync", stream_index);
  }

  std::shared_ptr<StreamImpl> make_stream(int index) override {
    check_index(index, "Stream");
    return make_cuda_stream(index);
  }

 private:
  void check_index(int index, const char* op) {
    const int count = device_count();
    if (index < 0 || index >= count) {
      throw std::runtime_error(std::string(op) + " on cuda:" + std::to_string(index) + ": " +
                               std::to_string(count) + " GPU(s) visible");
    }
  }

  CachingAllocator& allocator(int index, const char* op) {
    check_index(index, op);
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = allocators_[static_cast<std::size_t>(index)];
    if (slot == nullptr) {
      slot = std::make_unique<CachingAllocator>("cuda:" + std::to_string(index) + " allocator",
                                                device_ops(index));
    }
    return *slot;
  }

  std::once_flag count_once_;
  int count_ = 0;
  std::mutex mu_;
  // Written once per device under mu_, before any pointer from it exists; read without it.
  std::array<std::unique_ptr<CachingAllocator>, kMaxDevices> allocators_;
  std::once_flag pinned_once_;
  std::unique_ptr<CachingAllocator> pinned_;
};

}  // namespace

DeviceBackend* make_cuda_backend() {
  // Never destroyed: tensors may be freed during static teardown, and by then the CUDA runtime
  // may already be unloaded, so the cache is left to the process's end.
  static CudaBackend* backend = new CudaBackend();
  return backend;
}

}  // namespace tandem::detail
