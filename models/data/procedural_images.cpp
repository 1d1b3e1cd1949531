#include "models/data/procedural_images.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "runtime/counter_rng.hpp"

namespace tandem::models::data {
namespace {

constexpr std::array<std::string_view, ProceduralImages::kMaxClasses> kKinds = {
    "horizontal-stripes",
    "vertical-stripes",
    "diagonal-stripes",
    "square",
    "disc",
    "cross",
    "triangle",
    "ring"};

// Pixel values are centred so the network sees inputs around zero.
constexpr float kCentre = 0.5f;

}  // namespace

std::string_view procedural_image_kind(int32_t label) {
  if (label < 0 || label >= ProceduralImages::kMaxClasses) {
    throw std::out_of_range("procedural images: no class " + std::to_string(label));
  }
  return kKinds[static_cast<size_t>(label)];
}

ProceduralImages::ProceduralImages(const ProceduralImagesSpec& spec, int64_t samples,
                                   uint64_t split)
    : spec_(spec), samples_(samples), split_(split) {
  if (spec.channels < 1 || spec.image_size < 8 || spec.classes < 2 || spec.classes > kMaxClasses ||
      spec.noise < 0 || samples < 0) {
    throw std::invalid_argument(
        "procedural images: needs channels >= 1, image_size >= 8, 2 <= classes <= " +
        std::to_string(kMaxClasses) + ", noise >= 0, samples >= 0");
  }
}

int32_t ProceduralImages::label(int64_t index) const {
  // The label comes first in the sample's stream, so labels are balanced and cheap.
  auto rng = RngStream::from_key(stream_key(spec_.seed, split_, static_cast<uint64_t>(index)));
  return static_cast<int32_t>(rng.below(static_cast<uint64_t>(spec_.classes)));
}

void ProceduralImages::render(int64_t index, float* image) const {
  auto rng = RngStream::from_key(stream_key(spec_.seed, split_, static_cast<uint64_t>(index)));
  const auto kind = static_cast<int32_t>(rng.below(static_cast<uint64_t>(spec_.classes)));
  const int64_t n = spec_.image_size;
  const auto size = static_cast<double>(n);

  // Colours: the foreground differs from the background by at least 0.3 in every channel.
  std::vector<float> bg(static_cast<size_t>(spec_.channels)), fg(bg.size());
  for (size_t c = 0; c < bg.size(); ++c) {
    bg[c] = static_cast<float>(rng.uniform());
    const auto delta = static_cast<float>(rng.uniform(0.3, 0.6));
    fg[c] = bg[c] > 0.5f ? bg[c] - delta : bg[c] + delta;
  }

  // Geometry, drawn for every kind so the stream layout does not depend on the class.
  const double period = rng.uniform(size / 8.0, size / 4.0);
  const double phase = rng.uniform(0.0, period);
  const double radius = rng.uniform(size / 4.0, size / 2.5);
  const double cx = rng.uniform(radius, size - radius);
  const double cy = rng.uniform(radius, size - radius);

  auto inside = [&](double x, double y) -> bool {
    const double dx = x - cx, dy = y - cy;
    switch (kind) {
      case 0:
        return std::fmod(y + phase, period) < period / 2;
      case 1:
        return std::fmod(x + phase, period) < period / 2;
      case 2:
        return std::fmod(x + y + phase, period) < period / 2;
      case 3:
        return std::abs(dx) < radius * 0.85 && std::abs(dy) < radius * 0.85;
      case 4:
        return dx * dx + dy * dy < radius * radius;
      case 5:
        return (std::abs(dx) < radius / 3 && std::abs(dy) < radius) ||
               (std::abs(dy) < radius / 3 && std::abs(dx) < radius);
      case 6:
        return dy > -radius && dy < radius && std::abs(dx) < (dy + radius) / 2;
      default: {
        const double r2 = dx * dx + dy * dy;
        return r2 < radius * radius && r2 > 0.36 * radius * radius;
      }
    }
  };

  const auto plane = static_cast<size_t>(n * n);
  for (int64_t y = 0; y < n; ++y) {
    for (int64_t x = 0; x < n; ++x) {
      // Sample at the pixel centre.
      const bool on = inside(static_cast<double>(x) + 0.5, static_cast<double>(y) + 0.5);
      const auto p = static_cast<size_t>(y * n + x);
      for (size_t c = 0; c < bg.size(); ++c) {
        image[c * plane + p] = (on ? fg[c] : bg[c]) - kCentre;
      }
    }
  }
  if (spec_.noise > 0) {
    for (size_t i = 0; i < plane * bg.size(); ++i) {
      image[i] += static_cast<float>(spec_.noise * rng.normal());
    }
  }
}

Batch ProceduralImages::get(std::span<const int64_t> indices) const {
  check_indices(indices);
  const auto b = static_cast<int64_t>(indices.size());
  const int64_t n = spec_.image_size;
  Batch batch{Tensor::empty({b, spec_.channels, n, n}, DType::f32), Tensor::empty({b}, DType::i32)};
  float* x = batch.inputs.data<float>();
  int32_t* y = batch.targets.data<int32_t>();
  const auto per_image = static_cast<size_t>(spec_.channels * n * n);
  for (size_t i = 0; i < indices.size(); ++i) {
    render(indices[i], x + i * per_image);
    y[i] = label(indices[i]);
  }
  return batch;
}

std::string ProceduralImages::describe() const {
  return "procedural-images(channels=" + std::to_string(spec_.channels) +
         ", size=" + std::to_string(spec_.image_size) +
         ", classes=" + std::to_string(spec_.classes) + ", seed=" + std::to_string(spec_.seed) +
         ", split=" + std::to_string(split_) + ", samples=" + std::to_string(samples_) + ")";
}

}  // namespace tandem::models::data
