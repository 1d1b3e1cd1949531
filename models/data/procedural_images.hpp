#pragma once
// Procedural images labelled by what they show: stripes of three orientations, and filled
// shapes (square, disc, cross, triangle, ring) at random positions and sizes, in random
// colours over a random background with Gaussian pixel noise. A small convolutional network
// tells them apart quickly, so they make an image-classification learning test without
// downloading anything.
#include <cstdint>
#include <string_view>

#include "models/data/dataset.hpp"

namespace tandem::models::data {

struct ProceduralImagesSpec {
  int64_t channels = 3;
  int64_t image_size = 32;
  int64_t classes = 6;  // the first `classes` kinds of `procedural_image_kind`
  double noise = 0.1;   // standard deviation of the pixel noise (pixels span [0, 1])
  uint64_t seed = 1;
};

class ProceduralImages final : public Dataset {
 public:
  static constexpr int64_t kMaxClasses = 8;

  // `split` selects an independent stream of images (0 training, 1 evaluation).
  ProceduralImages(const ProceduralImagesSpec& spec, int64_t samples, uint64_t split = 0);

  int64_t size() const override { return samples_; }
  Batch get(std::span<const int64_t> indices) const override;
  std::string describe() const override;
  Task task() const override { return Task::classification; }
  Shape input_shape() const override {
    return {spec_.channels, spec_.image_size, spec_.image_size};
  }
  DType input_dtype() const override { return DType::f32; }
  int64_t classes() const override { return spec_.classes; }

  // The label of sample `index` (cheaper than get()).
  int32_t label(int64_t index) const;

 private:
  void render(int64_t index, float* image) const;

  ProceduralImagesSpec spec_;
  int64_t samples_;
  uint64_t split_;
};

// Name of class `label`: "horizontal-stripes", "vertical-stripes", "diagonal-stripes",
// "square", "disc", "cross", "triangle", "ring".
std::string_view procedural_image_kind(int32_t label);

}  // namespace tandem::models::data
