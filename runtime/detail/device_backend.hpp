#pragma once

#include <cstddef>

#include "runtime/device.hpp"

namespace tandem::detail {

// Memory operations of a device with data other than the host. The core code calls these
// through a pointer, so it never needs to know at compile time whether CUDA is built.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual int device_count() = 0;
  virtual void* allocate(std::size_t bytes, int index) = 0;
  virtual void deallocate(void* ptr, int index) noexcept = 0;
  // Copies between host memory and this backend's devices, or between its devices.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    std::size_t bytes) = 0;
  virtual void set_zero(void* ptr, std::size_t bytes, int index) = 0;
};

// The CUDA backend: defined by cuda_backend.cu when CUDA is built, and by
// cuda_backend_absent.cpp (returning nullptr) otherwise; CMake picks one of the two.
DeviceBackend* cuda_backend();

}  // namespace tandem::detail
