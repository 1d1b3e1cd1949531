#pragma once
// Regression onto a fixed random "teacher" network: inputs are standard normal vectors, the
// targets are the `outputs` values of a one-hidden-layer tanh network drawn from the seed (the
// same kind of teacher as TeacherClassification, whose argmax it would be). A student with
// enough capacity drives the squared error towards zero, which makes this a learning test for
// the regression losses with a known floor.
#include <cstdint>
#include <vector>

#include "models/data/dataset.hpp"

namespace tandem::models::data {

struct TeacherRegressionSpec {
  int64_t features = 16;
  int64_t hidden = 32;
  int64_t outputs = 4;
  uint64_t seed = 1;  // draws the teacher and the inputs
};

class TeacherRegression final : public Dataset {
 public:
  // `split` selects an independent stream of inputs (0 training, 1 evaluation) labelled by the
  // same teacher.
  TeacherRegression(const TeacherRegressionSpec& spec, int64_t samples, uint64_t split = 0);

  int64_t size() const override { return samples_; }
  // inputs f32 [B, features], targets f32 [B, outputs]
  Batch get(std::span<const int64_t> indices) const override;
  std::string describe() const override;
  Task task() const override { return Task::regression; }
  Shape input_shape() const override { return {spec_.features}; }
  DType input_dtype() const override { return DType::f32; }
  int64_t classes() const override { return spec_.outputs; }

  // The teacher's outputs for one input of `features` values, into `out` (`outputs` values).
  void targets(std::span<const float> x, float* out) const;

 private:
  TeacherRegressionSpec spec_;
  int64_t samples_;
  uint64_t split_;
  // w1_ [features, hidden], b1_ [hidden], w2_ [hidden, outputs]: input-major, as targets()
  // reads them.
  std::vector<double> w1_, b1_, w2_;
};

}  // namespace tandem::models::data
