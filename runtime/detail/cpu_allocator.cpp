#include "runtime/detail/cpu_allocator.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
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

std::size_t rounded(std::size_t bytes) {
  const std::size_t unit = bytes >= kCachedBlockMin ? std::size_t{4096} : kCpuAlignment;
  const std::size_t r = (bytes + unit - 1) / unit * unit;
  return r == 0 ? kCpuAlignment : r;
}

}  // namespace

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
    if (c.cached + size <= kMaxCachedBytes) {
      try {
        c.free_blocks[size].push_back(ptr);
        c.cached += size;
        return;
      } catch (...) {
        // No memory for the bookkeeping: free the block instead.
      }
    }
  }
  std::free(ptr);
}

std::size_t cpu_release_cached() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::size_t released = 0;
  for (auto& [size, blocks] : c.free_blocks) {
    for (void* p : blocks) std::free(p);
    released += size * blocks.size();
    blocks.clear();
  }
  c.cached = 0;
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
