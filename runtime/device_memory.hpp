#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/device.hpp"

namespace tandem {

// Memory held by tensors of one device, as its allocator sees it. Sizes are the allocator's
// rounded sizes, so they may exceed the sum of Tensor::nbytes().
struct DeviceMemoryStats {
  std::size_t allocated_bytes = 0;  // held by live allocations
  std::size_t cached_bytes = 0;     // freed and kept for reuse, not returned to the system
  std::size_t peak_bytes = 0;       // highest allocated_bytes since start or reset_peak_memory
  // Calls that reached the system allocator (cudaMalloc, aligned_alloc). Once a training step
  // has warmed the cache, this stays put from step to step.
  std::uint64_t system_allocations = 0;
};

// cpu: the host allocator of runtime/detail/cpu_allocator (blocks below 256 KiB are never
// cached). cuda:N: that device's caching allocator (zeros before its first allocation). sim:
// all zeros. Throws std::runtime_error for cuda without the CUDA backend.
DeviceMemoryStats device_memory_stats(Device device);
// Returns the device's cached blocks to the system; returns the bytes released. The cuda
// allocator also does this by itself, once, when an allocation runs out of memory.
std::size_t release_cached_memory(Device device);
// Sets peak_bytes to the current allocated_bytes (to measure one step's peak).
void reset_peak_memory(Device device);

}  // namespace tandem
