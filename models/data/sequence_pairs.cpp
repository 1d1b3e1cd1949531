#include "models/data/sequence_pairs.hpp"

#include <stdexcept>
#include <vector>

#include "runtime/counter_rng.hpp"

namespace tandem::models::data {

SequencePairs::SequencePairs(const SequencePairsSpec& spec, int64_t samples, uint64_t split)
    : spec_(spec), samples_(samples), split_(split) {
  if (spec.vocab < 2 || spec.length < 1 || samples < 1) {
    throw std::invalid_argument("sequence-pairs: vocab must be >= 2, length and samples >= 1");
  }
  GraphSpec g;
  g.inputs = {{spec.source, {spec.length}, "i32"}, {spec.decoder, {spec.length}, "i32"}};
  layout_ = InputLayout::of(g);
}

Batch SequencePairs::get(std::span<const int64_t> indices) const {
  check_indices(indices);
  const auto b = static_cast<int64_t>(indices.size());
  const auto n = static_cast<size_t>(spec_.length);
  std::vector<int32_t> src(static_cast<size_t>(b) * n), dec(src.size()), tgt(src.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    auto rng =
        RngStream::from_key(stream_key(spec_.seed, split_, static_cast<uint64_t>(indices[i])));
    int32_t* s = src.data() + i * n;
    for (size_t t = 0; t < n; ++t) {
      s[t] = static_cast<int32_t>(1 + rng.below(static_cast<uint64_t>(spec_.vocab - 1)));
    }
    for (size_t t = 0; t < n; ++t) {
      tgt[i * n + t] = s[n - 1 - t];
      dec[i * n + t] = t == 0 ? 0 : s[n - t];
    }
  }
  const Shape shape{b, spec_.length};
  return Batch{layout_.pack({{spec_.source, Tensor::from_vector(src, shape)},
                             {spec_.decoder, Tensor::from_vector(dec, shape)}}),
               Tensor::from_vector(tgt, shape)};
}

std::string SequencePairs::describe() const {
  return "sequence-pairs(vocab=" + std::to_string(spec_.vocab) +
         ", length=" + std::to_string(spec_.length) + ", seed=" + std::to_string(spec_.seed) +
         ", split=" + std::to_string(split_) + ", samples=" + std::to_string(samples_) + ")";
}

}  // namespace tandem::models::data
