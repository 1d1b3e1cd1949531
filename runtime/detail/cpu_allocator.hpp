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

//
// Blocks from 256 KiB up live on transparent huge pages (2 MiB, `madvise(MADV_HUGEPAGE)`) where
// that wastes at most an eighth: a block of 2 MiB or more is a run of whole huge pages; a smaller
// one is a slot of a 2 MiB chunk carved into blocks of its size (1 MiB: two, 256 KiB: eight),
// whose other slots wait in the cache. Huge pages spare the TLB, and above all they make pinning
// a tensor's pages cheap: UCX's shared-memory transfer (`cma`, process_vm_readv) looks up every
// page of the sender's buffer, and with 4 KiB pages that lookup cost more than the copy itself
// (a UcxChannel stream of 1 MiB tensors: 11 -> 28 GB/s). TANDEM_CPU_HUGE_PAGES=0 turns this off.
struct HugeLayout {
  std::size_t chunk_bytes = 0;  // 0: a plain block
  std::size_t blocks = 0;       // blocks of the size per chunk
};
HugeLayout huge_layout(std::size_t rounded_bytes);

// Returns every cached block to the system (a carved chunk only once all its blocks are cached:
// the others stay cached); returns the bytes released.
std::size_t cpu_release_cached();
std::size_t cpu_cached_bytes();
// Live bytes (rounded sizes), cached bytes, peak and system allocations of all host tensors.
DeviceMemoryStats cpu_memory_stats();
void cpu_reset_peak();

inline constexpr std::size_t kCachedBlockMin = std::size_t{256} << 10;
inline constexpr std::size_t kMaxCachedBytes = std::size_t{4} << 30;
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

}  // namespace tandem::detail
