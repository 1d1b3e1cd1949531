#pragma once

#include <cstddef>

#include "runtime/device.hpp"

namespace tandem {

// One allocation shared by every Tensor handle and view on it; freed with the last handle.
// Sim storage has no memory (ptr == nullptr, bytes == 0). runtime/tensor.hpp names it only as
// an opaque type; its definition stays here, private to the runtime.
struct TensorStorage {
  // pinned: page-locked host memory (device must be cpu); ordinary host memory when the CUDA
  // backend is not built, since then nothing needs page-locking.
  TensorStorage(std::size_t bytes, Device device, bool pinned = false);
  ~TensorStorage();
  TensorStorage(const TensorStorage&) = delete;
  TensorStorage& operator=(const TensorStorage&) = delete;

  void* ptr = nullptr;
  std::size_t bytes = 0;
  Device device;
  bool pinned = false;
};

}  // namespace tandem

namespace tandem::detail {

inline constexpr std::size_t kCpuAlignment = 64;

}  // namespace tandem::detail
