#pragma once

#include <cstddef>
#include <memory>

#include "runtime/device.hpp"
#include "runtime/device_memory.hpp"

namespace tandem::detail {

class StreamImpl;

// Operations of a device with data other than the host. The core code calls these through a
// pointer, so it never needs to know at compile time whether CUDA is built.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual int device_count() = 0;
  // Device memory comes from a caching allocator per device (see caching_allocator.hpp); a
  // block freed here is reused by the next allocation of its size class.
  virtual void* allocate(std::size_t bytes, int index) = 0;
  virtual void deallocate(void* ptr, int index) noexcept = 0;
  virtual DeviceMemoryStats memory_stats(int index) = 0;
  virtual std::size_t release_cached(int index) = 0;
  virtual void reset_peak(int index) = 0;
  // Page-locked host memory, so host<->device copies run asynchronously and at full speed;
  // nullptr when no GPU is visible (the caller then uses ordinary host memory).
  virtual void* allocate_pinned(std::size_t bytes) = 0;
  virtual void deallocate_pinned(void* ptr) noexcept = 0;
  // Copies between host memory and this backend's devices, or between its devices.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    std::size_t bytes) = 0;
  virtual void set_zero(void* ptr, std::size_t bytes, int index) = 0;
  // The same, ordered on a stream of this backend (native: its native_handle(), on
  // cuda:stream_index); they return before the work runs.
  virtual void copy_async(void* dst, Device dst_device, const void* src, Device src_device,
                          std::size_t bytes, void* native_stream, int stream_index) = 0;
  virtual void set_zero_async(void* ptr, std::size_t bytes, void* native_stream,
                              int stream_index) = 0;
  // Throws std::runtime_error when cuda:index is not visible.
  virtual std::shared_ptr<StreamImpl> make_stream(int index) = 0;
};

// The CUDA backend, loading the CUDA plugin (runtime/plugin.hpp) on the first call; nullptr
// when there is none (a CPU-only build, or a plugin that could not be loaded).
DeviceBackend* cuda_backend();
// The CUDA backend if its plugin is loaded already, else nullptr; never loads it. For what a
// CPU-only run also does (page-locked host buffers), which is worth doing only once a GPU is in
// use.
DeviceBackend* loaded_cuda_backend();
// Called by the CUDA plugin's entry point with make_cuda_backend()'s backend.
void register_cuda_backend(DeviceBackend* backend);
// Defined in the CUDA plugin only (cuda_backend.cu): the core reaches it through the
// registration, never by this name.
DeviceBackend* make_cuda_backend();

}  // namespace tandem::detail
