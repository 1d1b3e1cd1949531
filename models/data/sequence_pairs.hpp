#pragma once
// A sequence-to-sequence task with a known answer: the source is `length` random tokens in
// [1, vocab), the target is the source reversed, and the decoder reads the target shifted right
// behind token 0 (teacher forcing). Samples are the model's two named inputs, packed as the model
// takes them (models/input_layout.hpp): the packing checks each against the declaration.
#include <cstdint>
#include <string>

#include "models/data/dataset.hpp"
#include "models/input_layout.hpp"

namespace tandem::models::data {

struct SequencePairsSpec {
  int64_t vocab = 16;
  int64_t length = 8;
  uint64_t seed = 1;
  std::string source = "src", decoder = "tgt";  // the inputs' names
};

class SequencePairs final : public Dataset {
 public:
  // `split` selects an independent stream (0 training, 1 evaluation).
  SequencePairs(const SequencePairsSpec& spec, int64_t samples, uint64_t split = 0);

  int64_t size() const override { return samples_; }
  // inputs i32 [B, 2 * length] (source, then decoder input), targets i32 [B, length]
  Batch get(std::span<const int64_t> indices) const override;
  std::string describe() const override;
  Task task() const override { return Task::language_modeling; }
  Shape input_shape() const override { return {layout_.width()}; }
  DType input_dtype() const override { return DType::i32; }
  int64_t classes() const override { return spec_.vocab; }

 private:
  SequencePairsSpec spec_;
  int64_t samples_;
  uint64_t split_;
  InputLayout layout_;
};

}  // namespace tandem::models::data
