#include "models/kernels/cpu/bf16_weight_cache.hpp"

#include <stdexcept>
#include <string>

#include "models/kernels/cpu/bf16_convert.hpp"

namespace tandem::models::cpu {

Tensor Bf16WeightCache::get(const Tensor& w) {
  if (!w.defined() || w.dtype() != DType::f32 || !w.device().is_cpu()) {
    throw std::invalid_argument("Bf16WeightCache::get: " + w.describe() +
                                " is not an f32 CPU tensor");
  }
  const Key key{w.raw_data(), w.numel()};
  {
    const std::lock_guard lock(mutex_);
    sweep();
    if (const auto it = entries_.find(key); it != entries_.end()) return it->second.copy;
  }
  // Rounded outside the lock: the rounding runs parallel loops, whose worker threads may pick up
  // other tasks meanwhile, some of which may want this lock. Two threads may both round a new
  // version; the first stored copy wins.
  Tensor copy = Tensor::empty(w.shape(), DType::bf16, Device::cpu());
  to_bf16(w.data<float>(), copy.data<BFloat16>(), w.numel());
  const std::lock_guard lock(mutex_);
  return entries_.try_emplace(key, Entry{w, copy}).first->second.copy;
}

void Bf16WeightCache::drop(const Tensor& w) {
  if (!w.defined() || !w.device().is_cpu()) return;
  const std::lock_guard lock(mutex_);
  entries_.erase(Key{w.raw_data(), w.numel()});
}

std::size_t Bf16WeightCache::size() const {
  const std::lock_guard lock(mutex_);
  return entries_.size();
}

void Bf16WeightCache::sweep() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->second.weight.storage_unique() ? entries_.erase(it) : std::next(it);
  }
}

}  // namespace tandem::models::cpu
