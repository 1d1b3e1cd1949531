#pragma once
// A caching allocator over a slow system allocator (cudaMalloc, cudaHostAlloc): freed blocks
// are kept in free lists by (stream, rounded size) and handed to the next allocation of that
// size on that stream, so a training step that allocates the same activation sizes every step
// stops calling the system allocator after the first step. Plain C++, so its policy is tested
// on machines without a GPU (tests/runtime/caching_allocator_test.cpp).
//
// Why per stream: a block freed on the host may still be in use by work queued on the stream
// that used it. Handing it to the next allocation on the same stream is safe because that
// stream runs the new user's work after the old one; handing it to another stream is not.
// Memory used on a stream other than its allocation stream must be kept alive (hold the Tensor
// handle) until an event recorded after that use has completed.
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/device_memory.hpp"

namespace tandem::detail {

class CachingAllocator {
 public:
  struct SystemOps {
    // Returns nullptr when out of memory; throws for any other failure.
    std::function<void*(std::size_t bytes)> allocate;
    std::function<void(void* ptr)> free;
  };

  CachingAllocator(std::string name, SystemOps ops);
  // Returns the cached blocks; live blocks are the owners' (they must be freed first).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream` (an opaque key: cudaStream_t or nullptr).
  // Out of memory: releases the whole cache and retries once, then throws std::runtime_error
  // naming the allocator, the size and the memory held.
  void* allocate(std::size_t bytes, const void* stream = nullptr);
  // ptr must come from allocate(); nullptr is ignored.
  void deallocate(void* ptr) noexcept;
  std::size_t release_cached();
  DeviceMemoryStats stats() const;
  void reset_peak();

  // Below 1 MiB: multiples of 512 bytes. Above: 8 size classes per power of two (at most 12.5%
  // waste), so tensors of one shape land in one class and reuse each other's blocks.
  static std::size_t round_size(std::size_t bytes);

 private:
  struct Block {
    std::size_t size;
    const void* stream;
  };
  struct Key {
    const void* stream;
    std::size_t size;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept;
  };

  std::size_t release_cached_locked();

  std::string name_;
  SystemOps ops_;
  mutable std::mutex mu_;
  std::unordered_map<Key, std::vector<void*>, KeyHash> free_;
  std::unordered_map<void*, Block> live_;
  DeviceMemoryStats stats_;
};

}  // namespace tandem::detail
