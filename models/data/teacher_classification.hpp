#pragma once
// Classification labelled by a fixed random "teacher" network: inputs are standard normal
// vectors, the label is the argmax of a one-hidden-layer tanh network drawn from the seed.
// The teacher's class scores are centred over a calibration sample so the classes are
// roughly balanced. A student with enough capacity can learn the labels almost perfectly,
// which makes this a learning test with a known ceiling.
#include <cstdint>
#include <mutex>
#include <vector>

#include "models/data/dataset.hpp"

namespace tandem::models::data {

struct TeacherSpec {
  int64_t features = 16;
  int64_t hidden = 32;
  int64_t classes = 4;
  uint64_t seed = 1;  // draws the teacher and the inputs
};

class TeacherClassification final : public Dataset {
 public:
  // `split` selects an independent stream of inputs labelled by the same teacher (0 for
  // training, 1 for evaluation), so held-out data never overlaps the training samples.
  TeacherClassification(const TeacherSpec& spec, int64_t samples, uint64_t split = 0);

  int64_t size() const override { return samples_; }
  Batch get(std::span<const int64_t> indices) const override;
  std::string describe() const override;
  Task task() const override { return Task::classification; }
  Shape input_shape() const override { return {spec_.features}; }
  DType input_dtype() const override { return DType::f32; }
  int64_t classes() const override { return spec_.classes; }

  // The teacher's label for one input of `features` values.
  int32_t label(std::span<const float> x) const;

 private:
  void scores(std::span<const float> x, double* out) const;

  TeacherSpec spec_;
  int64_t samples_;
  uint64_t split_;
  // Samples are kept once drawn when the whole set fits kCacheBytes: a run's later epochs copy
  // them instead of drawing `features` normals and a teacher pass per sample again (20 ms of
  // the loader per 256 samples of 1024 features, beside a 60 ms training step).
  static constexpr int64_t kCacheBytes = int64_t{256} << 20;
  bool cache_ = false;
  mutable std::mutex cache_mu_;
  mutable std::vector<float> cached_x_;    // [samples, features], allocated on first use
  mutable std::vector<int32_t> cached_y_;  // -1: not drawn yet
  // w1_ [features, hidden], b1_ [hidden], w2_ [hidden, classes], b2_ [classes]: the
  // weights transposed (input-major), as scores() reads them.
  std::vector<double> w1_, b1_, w2_, b2_;
};

}  // namespace tandem::models::data
