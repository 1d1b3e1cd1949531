#pragma once
// Synthetic "video captions" with a known answer, for S2VT (models/zoo/sequence_graphs.hpp):
// each sample draws a caption of `words` tokens in [1, vocab); its `frames` frames show the words
// in order, frame f showing word f * words / frames (so frames >= words: every word is shown),
// and a frame's `features` values are the shown token's fixed random embedding (standard normal
// per token and feature, the same in every sample and split) plus N(0, noise^2) noise. A model
// that recognises the frames and remembers their order captions them exactly.
//
// Samples are the model's two named inputs packed as it takes them (models/input_layout.hpp):
// f32 frames [frames, features] and the i32 caption shifted right behind token 0 (teacher
// forcing), which mix dtypes and so travel as f32. Targets are i32 [frames + words]: token 0
// (<pad>) for every frame step, then the caption.
#include <cstdint>
#include <string>

#include "models/data/dataset.hpp"
#include "models/input_layout.hpp"

namespace tandem::models::data {

struct VideoCaptionsSpec {
  int64_t vocab = 10;
  int64_t words = 4;
  int64_t frames = 8;
  int64_t features = 16;
  double noise = 0.1;
  uint64_t seed = 1;
  std::string frames_input = "frames", caption_input = "caption";  // the inputs' names
};

class VideoCaptions final : public Dataset {
 public:
  // `split` selects an independent stream (0 training, 1 evaluation). Throws
  // std::invalid_argument for vocab < 2, words < 1, frames < words, features < 1, negative
  // noise or samples < 1.
  VideoCaptions(const VideoCaptionsSpec& spec, int64_t samples, uint64_t split = 0);

  int64_t size() const override { return samples_; }
  // inputs f32 [B, frames * features + words], targets i32 [B, frames + words]
  Batch get(std::span<const int64_t> indices) const override;
  std::string describe() const override;
  Task task() const override { return Task::language_modeling; }
  Shape input_shape() const override { return {layout_.width()}; }
  DType input_dtype() const override { return layout_.dtype(); }
  int64_t classes() const override { return spec_.vocab; }

 private:
  VideoCaptionsSpec spec_;
  int64_t samples_;
  uint64_t split_;
  InputLayout layout_;
  std::vector<float> embeddings_;  // [vocab, features]
};

}  // namespace tandem::models::data
