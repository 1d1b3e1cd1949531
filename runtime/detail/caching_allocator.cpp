#include "runtime/detail/caching_allocator.hpp"

#include <fmt/format.h>

#include <bit>
#include <functional>
#include <new>
#include <stdexcept>
#include <utility>

#include "runtime/log.hpp"

namespace tandem::detail {

CachingAllocator::CachingAllocator(std::string name, SystemOps ops)
    : name_(std::move(name)), ops_(std::move(ops)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

std::size_t CachingAllocator::KeyHash::operator()(const Key& k) const noexcept {
  return std::hash<const void*>()(k.stream) ^ (std::hash<std::size_t>()(k.size) * 31);
}

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  constexpr std::size_t kSmallUnit = 512;
  constexpr std::size_t kLarge = std::size_t{1} << 20;
  if (bytes == 0) return kSmallUnit;
  if (bytes < kLarge) return (bytes + kSmallUnit - 1) / kSmallUnit * kSmallUnit;
  const std::size_t step = std::bit_floor(bytes) / 8;
  return (bytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(std::size_t bytes, const void* stream) {
  const std::size_t size = round_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(Key{stream, size});
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      live_.emplace(p, Block{size, stream});  // may throw: the block is still listed as free
      it->second.pop_back();
      stats_.cached_bytes -= size;
      stats_.allocated_bytes += size;
      stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.allocated_bytes);
      return p;
    }
  }
  // The system allocator runs without the lock: cudaMalloc can take milliseconds, and other
  // threads' cache hits should not wait for it.
  void* p = ops_.allocate(size);
  if (p == nullptr) {
    // Blocks cached for other sizes or streams may be what is missing.
    std::size_t released = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      released = release_cached_locked();
    }
    p = ops_.allocate(size);
    if (p == nullptr) {
      const DeviceMemoryStats s = stats();
      throw std::runtime_error(fmt::format(
          "{}: out of memory allocating {} bytes ({} rounded); {} bytes allocated, {} released "
          "from the cache before retrying",
          name_, bytes, size, s.allocated_bytes, released));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  try {
    live_.emplace(p, Block{size, stream});
  } catch (...) {
    ops_.free(p);
    throw;
  }
  ++stats_.system_allocations;
  stats_.allocated_bytes += size;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.allocated_bytes);
  return p;
}

void CachingAllocator::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    tandem::log::error("{}: deallocate of {} which it did not allocate (ignored)", name_, ptr);
    return;
  }
  const Block block = it->second;
  live_.erase(it);
  stats_.allocated_bytes -= block.size;
  try {
    free_[Key{block.stream, block.size}].push_back(ptr);
    stats_.cached_bytes += block.size;
  } catch (...) {
    ops_.free(ptr);  // no memory for the bookkeeping: give the block back instead
  }
}

std::size_t CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  return release_cached_locked();
}

std::size_t CachingAllocator::release_cached_locked() {
  std::size_t released = 0;
  for (auto& [key, blocks] : free_) {
    for (void* p : blocks) ops_.free(p);
    released += key.size * blocks.size();
  }
  free_.clear();
  stats_.cached_bytes = 0;
  return released;
}

DeviceMemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.allocated_bytes;
}

}  // namespace tandem::detail
