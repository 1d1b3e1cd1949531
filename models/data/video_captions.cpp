#include "models/data/video_captions.hpp"

#include <stdexcept>
#include <vector>

#include "runtime/counter_rng.hpp"

namespace tandem::models::data {
namespace {

// The stream of the tokens' embeddings: apart from the samples' streams (the splits, 0 and 1).
constexpr uint64_t kEmbeddingStream = 0x5e2f;

}  // namespace

VideoCaptions::VideoCaptions(const VideoCaptionsSpec& spec, int64_t samples, uint64_t split)
    : spec_(spec), samples_(samples), split_(split) {
  if (spec.vocab < 2 || spec.words < 1 || spec.frames < spec.words || spec.features < 1 ||
      !(spec.noise >= 0) || samples < 1) {
    throw std::invalid_argument(
        "video-captions: vocab must be >= 2, words >= 1, frames >= words, features >= 1, noise "
        ">= 0 and samples >= 1");
  }
  GraphSpec g;
  g.inputs = {{spec.frames_input, {spec.frames, spec.features}, "f32"},
              {spec.caption_input, {spec.words}, "i32"}};
  layout_ = InputLayout::of(g);
  embeddings_.resize(static_cast<size_t>(spec.vocab * spec.features));
  for (int64_t t = 0; t < spec.vocab; ++t) {
    const uint64_t key = stream_key(spec.seed, kEmbeddingStream, static_cast<uint64_t>(t));
    for (int64_t f = 0; f < spec.features; ++f) {
      embeddings_[static_cast<size_t>(t * spec.features + f)] =
          static_cast<float>(counter_normal(key, static_cast<uint64_t>(f)));
    }
  }
}

Batch VideoCaptions::get(std::span<const int64_t> indices) const {
  check_indices(indices);
  const auto b = static_cast<int64_t>(indices.size());
  const int64_t w = spec_.words, nf = spec_.frames, d = spec_.features;
  std::vector<float> frames(static_cast<size_t>(b * nf * d));
  std::vector<int32_t> caption(static_cast<size_t>(b * w)),
      targets(static_cast<size_t>(b * (nf + w)));
  std::vector<int32_t> words(static_cast<size_t>(w));
  for (int64_t i = 0; i < b; ++i) {
    auto rng = RngStream::from_key(
        stream_key(spec_.seed, split_, static_cast<uint64_t>(indices[static_cast<size_t>(i)])));
    for (int32_t& t : words) {
      t = static_cast<int32_t>(1 + rng.below(static_cast<uint64_t>(spec_.vocab - 1)));
    }
    const uint64_t noise_key = rng.next();
    for (int64_t f = 0; f < nf; ++f) {
      const int32_t shown = words[static_cast<size_t>(f * w / nf)];
      const float* e = embeddings_.data() + static_cast<int64_t>(shown) * d;
      float* out = frames.data() + (i * nf + f) * d;
      for (int64_t k = 0; k < d; ++k) {
        out[k] =
            e[k] + static_cast<float>(spec_.noise *
                                      counter_normal(noise_key, static_cast<uint64_t>(f * d + k)));
      }
    }
    int32_t* tgt = targets.data() + i * (nf + w);
    for (int64_t f = 0; f < nf; ++f) tgt[f] = 0;
    for (int64_t t = 0; t < w; ++t) {
      tgt[nf + t] = words[static_cast<size_t>(t)];
      caption[static_cast<size_t>(i * w + t)] = t == 0 ? 0 : words[static_cast<size_t>(t - 1)];
    }
  }
  return Batch{layout_.pack({{spec_.frames_input, Tensor::from_vector(frames, {b, nf, d})},
                             {spec_.caption_input, Tensor::from_vector(caption, {b, w})}}),
               Tensor::from_vector(targets, {b, nf + w})};
}

std::string VideoCaptions::describe() const {
  return "video-captions(vocab=" + std::to_string(spec_.vocab) +
         ", words=" + std::to_string(spec_.words) + ", frames=" + std::to_string(spec_.frames) +
         ", features=" + std::to_string(spec_.features) + ", noise=" + std::to_string(spec_.noise) +
         ", seed=" + std::to_string(spec_.seed) + ", split=" + std::to_string(split_) +
         ", samples=" + std::to_string(samples_) + ")";
}

}  // namespace tandem::models::data
