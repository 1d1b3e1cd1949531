#pragma once

#include <cstddef>

#include "runtime/device_memory.hpp"

namespace tandem::detail {

// Host memory for tensors: 64-byte aligned. Large blocks (>= 256 KiB) are kept on free for reuse
// by the next allocation of the same rounded size: a training step allocates the same
// activation sizes every step, and returning them to the kernel makes every step pay the page
// faults again (glibc maps blocks above 32 MiB afresh on every malloc). The cache holds at most
// kMaxCachedBytes; beyond that freed blocks go back to the system.
void* cpu_allocate(std::size_t bytes);
void cpu_deallocate(void* ptr, std::size_t bytes) noexcept;

// Returns every cached block to the system; returns the bytes released.
std::size_t cpu_release_cached();
std::size_t cpu_cached_bytes();
// Live bytes (rounded sizes), cached bytes, peak and system allocations of all host tensors.
DeviceMemoryStats cpu_memory_stats();
void cpu_reset_peak();

inline constexpr std::size_t kCachedBlockMin = std::size_t{256} << 10;
inline constexpr std::size_t kMaxCachedBytes = std::size_t{4} << 30;

}  // namespace tandem::detail
