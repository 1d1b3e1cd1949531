#pragma once
// Which samples form minibatch `step`: epochs are independent permutations of the dataset
// drawn from (seed, epoch), cut into full minibatches (the remainder of an epoch is skipped,
// so every minibatch has the same size). The indices are a pure function of (seed, step):
// a run resumed at any step, or a loader on another host, sees exactly the same minibatches.
#include <cstdint>
#include <vector>

namespace tandem::models::data {

class MinibatchSampler {
 public:
  // shuffle = false visits samples in order (for evaluation). Throws std::invalid_argument
  // unless 1 <= minibatch <= dataset_size.
  MinibatchSampler(int64_t dataset_size, int64_t minibatch, uint64_t seed, bool shuffle = true);

  int64_t dataset_size() const { return size_; }
  int64_t minibatch() const { return minibatch_; }
  int64_t batches_per_epoch() const { return size_ / minibatch_; }
  int64_t epoch_of(int64_t step) const { return step / batches_per_epoch(); }

  // The sample indices of minibatch `step` (step >= 0). Not thread-safe: it caches the
  // current epoch's permutation; give each thread its own sampler.
  std::vector<int64_t> indices(int64_t step) const;

  // The permutation of epoch `epoch` (all dataset_size indices).
  std::vector<int64_t> permutation(int64_t epoch) const;

 private:
  int64_t size_;
  int64_t minibatch_;
  uint64_t seed_;
  bool shuffle_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

}  // namespace tandem::models::data
