#pragma once

#include <cstddef>

#include "runtime/device.hpp"

namespace tandem::detail {

// One allocation shared by every Tensor handle and view on it; freed with the last handle.
// Sim storage has no memory (ptr == nullptr, bytes == 0).
struct Storage {
  Storage(std::size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* ptr = nullptr;
  std::size_t bytes = 0;
  Device device;
};

inline constexpr std::size_t kCpuAlignment = 64;

}  // namespace tandem::detail
