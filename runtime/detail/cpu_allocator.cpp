#include "runtime/detail/cpu_allocator.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "runtime/detail/storage.hpp"

namespace tandem::detail {
namespace {

struct Cache {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks;  // by rounded size
  // 2 MiB chunks carved into blocks of one size (see cpu_allocator.hpp), by base address: how
  // many blocks each holds. A chunk goes back to the system only once all are cached.
  std::unordered_map<std::uintptr_t, std::size_t> chunks;
  std::size_t cached = 0;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may be freed during static teardown
  return *c;
}

// Counted apart from the cache's lock: small blocks never take that lock, and a relaxed atomic
// costs them next to nothing.
struct Counters {
  std::atomic<std::size_t> allocated{0};
  std::atomic<std::size_t> peak{0};
  std::atomic<std::uint64_t> system_allocations{0};
};

Counters& counters() {
  static Counters* c = new Counters();  // never destroyed, like the cache
  return *c;
}

void count_allocated(std::size_t size) {
  Counters& c = counters();
  const std::size_t now = c.allocated.fetch_add(size, std::memory_order_relaxed) + size;
  std::size_t peak = c.peak.load(std::memory_order_relaxed);
  while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

std::uintptr_t chunk_of(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) & ~(std::uintptr_t{kHugePageBytes} - 1);
}

// Whether `p`, a block of `size` bytes, is a slot of a carved chunk (under the cache's lock).
bool carved(const Cache& c, const void* p, std::size_t size) {
  return size < kHugePageBytes && c.chunks.contains(chunk_of(p));
}

bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("TANDEM_CPU_HUGE_PAGES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return wanted;
}

std::size_t rounded(std::size_t bytes) {
  const std::size_t unit = bytes >= kCachedBlockMin ? std::size_t{4096} : kCpuAlignment;
  const std::size_t r = (bytes + unit - 1) / unit * unit;
  return r == 0 ? kCpuAlignment : r;
}

// A block on huge pages, under the cache's lock: a chunk of whole 2 MiB pages, aligned to them
// and advised as huge; a block under 2 MiB takes the first slot of a carved chunk and the other
// slots go to the cache. Null (the caller falls back to the plain path) where the layout wastes
// more than an eighth, or the system has no memory for it.
void* allocate_huge(Cache& c, std::size_t size) {
  const HugeLayout layout = huge_layout(size);
  if (layout.chunk_bytes == 0) return nullptr;
  void* p = std::aligned_alloc(kHugePageBytes, layout.chunk_bytes);
  if (p == nullptr) return nullptr;
  if (layout.blocks > 1) {
    try {
      std::vector<void*>& list = c.free_blocks[size];
      list.reserve(list.size() + layout.blocks - 1);
      c.chunks.emplace(reinterpret_cast<std::uintptr_t>(p), layout.blocks);
      for (std::size_t i = 1; i < layout.blocks; ++i) {
        list.push_back(static_cast<std::byte*>(p) + i * size);
      }
    } catch (...) {
      c.chunks.erase(reinterpret_cast<std::uintptr_t>(p));
      std::free(p);
      return nullptr;
    }
    c.cached += (layout.blocks - 1) * size;
  }
  // Advice only: a kernel without transparent huge pages (or with them off) refuses or ignores it.
  (void)::madvise(p, layout.chunk_bytes, MADV_HUGEPAGE);
  counters().system_allocations.fetch_add(1, std::memory_order_relaxed);
  count_allocated(size);
  return p;
}

}  // namespace

HugeLayout huge_layout(std::size_t size) {
  if (size < kCachedBlockMin || !huge_pages_wanted()) return {};
  if (size <= kHugePageBytes) {
    const std::size_t blocks = kHugePageBytes / size;
    if ((kHugePageBytes - blocks * size) * 8 > kHugePageBytes) return {};
    return {kHugePageBytes, blocks};
  }
  const std::size_t chunk = (size + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if ((chunk - size) * 8 > size) return {};
  return {chunk, 1};
}

void* cpu_allocate(std::size_t bytes) {
  const std::size_t size = rounded(bytes);
  if (size >= kCachedBlockMin) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.cached -= size;
      count_allocated(size);
      return p;
    }
    if (void* p = allocate_huge(c, size)) return p;
  }
  void* p = std::aligned_alloc(kCpuAlignment, size);
  if (p == nullptr) {
    // Memory held by the cache may be what is missing.
    if (cpu_release_cached() > 0) p = std::aligned_alloc(kCpuAlignment, size);
    if (p == nullptr) throw std::bad_alloc();
  }
  counters().system_allocations.fetch_add(1, std::memory_order_relaxed);
  count_allocated(size);
  return p;
}

void cpu_deallocate(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  const std::size_t size = rounded(bytes);
  counters().allocated.fetch_sub(size, std::memory_order_relaxed);
  if (size >= kCachedBlockMin) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    // A carved block cannot go back to the system alone: it is cached whatever the cap.
    const bool slot = carved(c, ptr, size);
    if (slot || c.cached + size <= kMaxCachedBytes) {
      try {
        c.free_blocks[size].push_back(ptr);
        c.cached += size;
        return;
      } catch (...) {
        // No memory for the bookkeeping: free the block instead (a carved one is lost).
        if (slot) return;
      }
    }
  }
  std::free(ptr);
}

std::size_t cpu_release_cached() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  // Carved chunks go back whole, once every block of theirs is cached; their other blocks stay.
  std::unordered_map<std::uintptr_t, std::size_t> cached_of_chunk;
  for (const auto& [size, blocks] : c.free_blocks) {
    for (void* p : blocks) {
      if (carved(c, p, size)) ++cached_of_chunk[chunk_of(p)];
    }
  }
  const auto whole = [&](std::uintptr_t base) {
    return cached_of_chunk.at(base) == c.chunks.at(base);
  };
  std::size_t released = 0;
  for (auto& [size, blocks] : c.free_blocks) {
    std::vector<void*> kept;
    for (void* p : blocks) {
      const bool slot = carved(c, p, size);
      if (slot && !whole(chunk_of(p))) {
        kept.push_back(p);
        continue;
      }
      if (!slot) std::free(p);
      released += size;
    }
    blocks = std::move(kept);
  }
  for (const auto& [base, count] : cached_of_chunk) {
    if (whole(base)) {
      std::free(reinterpret_cast<void*>(base));
      c.chunks.erase(base);
    }
  }
  c.cached -= released;
  return released;
}

std::size_t cpu_cached_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.cached;
}

DeviceMemoryStats cpu_memory_stats() {
  DeviceMemoryStats s;
  s.cached_bytes = cpu_cached_bytes();
  const Counters& c = counters();
  s.allocated_bytes = c.allocated.load(std::memory_order_relaxed);
  s.peak_bytes = std::max(s.allocated_bytes, c.peak.load(std::memory_order_relaxed));
  s.system_allocations = c.system_allocations.load(std::memory_order_relaxed);
  return s;
}

void cpu_reset_peak() {
  Counters& c = counters();
  c.peak.store(c.allocated.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace tandem::detail
