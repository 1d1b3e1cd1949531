#pragma once
// The receiving side's mapped segments of the `cuda-ipc` data plane: cudaIpcOpenMemHandle is
// slow (it maps the allocation into this process) and a sender's caching allocator hands out
// the same few segments again and again, so each segment is opened once, on first use, and
// kept. A handle names one allocation for its life (a segment freed and allocated anew gets a
// new handle), so the handle's bytes are the key. At most `capacity` segments stay open: the
// least recently used one is closed to make room (a sender that frees and reallocates would
// otherwise pile up mappings of memory it no longer uses, which stays allocated while mapped).
//
// A segment is closed (evicted, forgotten, or with the cache) only when no copy from it is
// pending: the real close waits for the device's work first (cuda_ipc_memory.hpp), which is
// why eviction is rare by design (the capacity is far above the segments a pipeline uses).
//
// How a handle is opened and closed is an option, so that the cache's policy is tested without
// a GPU; cuda_ipc_memory.hpp gives the real ones.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>

#include "transport/cuda_ipc_descriptor.hpp"

namespace tandem::transport {

struct CudaIpcSegmentOps {
  // The base of the segment `handle` names, mapped into this process; throws naming what failed.
  std::function<void*(const CudaIpcHandle& handle)> open;
  // Unmaps a base `open` returned; never throws.
  std::function<void(void* base)> close;
};

class CudaIpcSegments {
 public:
  explicit CudaIpcSegments(CudaIpcSegmentOps ops, std::size_t capacity = 256);
  // Closes every segment still open.
  ~CudaIpcSegments();
  CudaIpcSegments(const CudaIpcSegments&) = delete;
  CudaIpcSegments& operator=(const CudaIpcSegments&) = delete;

  // The base of `handle`'s segment, opened now or earlier. A failed open is not cached (the
  // next call tries again) and leaves the others open. Thread-safe.
  void* base(const CudaIpcHandle& handle);
  // Closes the segment of `handle` if open (the sender said it freed it).
  void forget(const CudaIpcHandle& handle);

  std::size_t open_count() const;
  std::uint64_t opens() const;  // calls of ops.open that succeeded, ever

 private:
  struct Entry {
    void* base;
    std::list<CudaIpcHandle>::iterator used;  // its place in lru_
  };

  CudaIpcSegmentOps ops_;
  std::size_t capacity_;
  mutable std::mutex mu_;
  std::map<CudaIpcHandle, Entry> open_;
  std::list<CudaIpcHandle> lru_;  // most recently used first
  std::uint64_t opens_ = 0;
};

}  // namespace tandem::transport
