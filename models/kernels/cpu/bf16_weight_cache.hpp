#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "runtime/tensor.hpp"

namespace tandem::models::cpu {

// bf16 copies of f32 CPU weights, one per version of a weight, so that a layer computing in
// bf16 rounds its weights once per update rather than on every product.
//
// A version is a weight's storage (keyed by its address and size). The cache keeps a handle to
// each weight it copied, so the storage cannot be freed and its address reused while the copy
// is cached, and Tensor::storage_unique() is false for it: the optimizers then update it
// copy-on-write, and the new values arrive in a new storage, which gets a copy of its own. An
// entry goes once the cache's handle is the storage's last (that version is gone). A writer that
// changes a weight in place regardless (a fused update into the weight, which its checks of
// storage_unique() rule out while a copy is cached, or a layer writing its weight gradient into
// a sink that aliases the weight) must call drop() for it after writing.
class Bf16WeightCache {
 public:
  // The bf16 copy (same shape, rounded to nearest even) of `w`, an f32 CPU tensor; made on the
  // first call for its storage. Throws std::invalid_argument naming w otherwise.
  Tensor get(const Tensor& w);
  // Forgets w's copy, if any (see above).
  void drop(const Tensor& w);
  // Copies held (tests).
  std::size_t size() const;

 private:
  using Key = std::pair<const void*, std::int64_t>;
  struct Entry {
    Tensor weight;  // keeps the version alive (and storage_unique() false)
    Tensor copy;
  };
  // Drops the entries whose weight only the cache still holds. Under mutex_.
  void sweep();

  mutable std::mutex mutex_;
  std::map<Key, Entry> entries_;
};

}  // namespace tandem::models::cpu
