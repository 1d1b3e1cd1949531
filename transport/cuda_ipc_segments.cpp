#include "transport/cuda_ipc_segments.hpp"

#include <stdexcept>
#include <utility>

namespace tandem::transport {

CudaIpcSegments::CudaIpcSegments(CudaIpcSegmentOps ops, std::size_t capacity)
    : ops_(std::move(ops)), capacity_(capacity) {
  if (!ops_.open || !ops_.close) {
    throw std::invalid_argument("CudaIpcSegments: both open and close are needed");
  }
  if (capacity_ == 0) throw std::invalid_argument("CudaIpcSegments: a capacity of 0 segments");
}

CudaIpcSegments::~CudaIpcSegments() {
  for (auto& [handle, entry] : open_) ops_.close(entry.base);
}

void* CudaIpcSegments::base(const CudaIpcHandle& handle) {
  std::lock_guard lock(mu_);
  auto it = open_.find(handle);
  if (it != open_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.used);
    return it->second.base;
  }
  void* const base = ops_.open(handle);
  ++opens_;
  if (open_.size() == capacity_) {
    const CudaIpcHandle oldest = lru_.back();
    lru_.pop_back();
    auto victim = open_.find(oldest);
    ops_.close(victim->second.base);
    open_.erase(victim);
  }
  lru_.push_front(handle);
  open_.emplace(handle, Entry{base, lru_.begin()});
  return base;
}

void CudaIpcSegments::forget(const CudaIpcHandle& handle) {
  std::lock_guard lock(mu_);
  auto it = open_.find(handle);
  if (it == open_.end()) return;
  ops_.close(it->second.base);
  lru_.erase(it->second.used);
  open_.erase(it);
}

std::size_t CudaIpcSegments::open_count() const {
  std::lock_guard lock(mu_);
  return open_.size();
}

std::uint64_t CudaIpcSegments::opens() const {
  std::lock_guard lock(mu_);
  return opens_;
}

}  // namespace tandem::transport
