#include "models/data/minibatch_sampler.hpp"

#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/counter_rng.hpp"

namespace tandem::models::data {
namespace {
constexpr uint64_t kSamplerStream = 0x5a3b1e;
}

MinibatchSampler::MinibatchSampler(int64_t dataset_size, int64_t minibatch, uint64_t seed,
                                   bool shuffle)
    : size_(dataset_size), minibatch_(minibatch), seed_(seed), shuffle_(shuffle) {
  if (minibatch < 1 || minibatch > dataset_size) {
    throw std::invalid_argument("minibatch of " + std::to_string(minibatch) +
                                " samples does not fit a dataset of " +
                                std::to_string(dataset_size) + " samples");
  }
}

std::vector<int64_t> MinibatchSampler::permutation(int64_t epoch) const {
  std::vector<int64_t> p(static_cast<size_t>(size_));
  std::iota(p.begin(), p.end(), int64_t{0});
  if (!shuffle_) return p;
  auto rng = RngStream::from_key(stream_key(seed_, kSamplerStream, static_cast<uint64_t>(epoch)));
  for (size_t i = p.size(); i > 1; --i) {  // Fisher-Yates
    const auto j = static_cast<size_t>(rng.below(i));
    std::swap(p[i - 1], p[j]);
  }
  return p;
}

std::vector<int64_t> MinibatchSampler::indices(int64_t step) const {
  if (step < 0) throw std::invalid_argument("negative minibatch step " + std::to_string(step));
  const int64_t epoch = epoch_of(step);
  if (epoch != cached_epoch_) {
    cached_ = permutation(epoch);
    cached_epoch_ = epoch;
  }
  const int64_t first = (step % batches_per_epoch()) * minibatch_;
  return {cached_.begin() + first, cached_.begin() + first + minibatch_};
}

}  // namespace tandem::models::data
