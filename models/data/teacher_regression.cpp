#include "models/data/teacher_regression.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/counter_rng.hpp"

namespace tandem::models::data {
namespace {

// Its own stream, so that a regression teacher never equals the classification one of a seed.
constexpr uint64_t kTeacherStream = 0x7eac4e6;

}  // namespace

TeacherRegression::TeacherRegression(const TeacherRegressionSpec& spec, int64_t samples,
                                     uint64_t split)
    : spec_(spec), samples_(samples), split_(split) {
  if (spec.features < 1 || spec.hidden < 1 || spec.outputs < 1 || samples < 0) {
    throw std::invalid_argument(
        "teacher-regression dataset: needs features >= 1, hidden >= 1, outputs >= 1, "
        "samples >= 0");
  }
  auto rng = RngStream::from_key(stream_key(spec.seed, kTeacherStream, 0));
  const auto f = static_cast<size_t>(spec.features);
  const auto h = static_cast<size_t>(spec.hidden);
  const auto c = static_cast<size_t>(spec.outputs);
  w1_.resize(h * f);
  b1_.resize(h);
  w2_.resize(c * h);
  // Unit-variance pre-activations keep tanh curved, and outputs of about unit variance give
  // a starting squared error near 1 whatever the widths.
  for (size_t j = 0; j < h; ++j) {
    for (size_t k = 0; k < f; ++k)
      w1_[k * h + j] = rng.normal() / std::sqrt(static_cast<double>(f));
  }
  for (auto& b : b1_) b = 0.5 * rng.normal();
  for (size_t m = 0; m < c; ++m) {
    for (size_t j = 0; j < h; ++j)
      w2_[j * c + m] = rng.normal() / std::sqrt(static_cast<double>(h) * 0.5);
  }
}

void TeacherRegression::targets(std::span<const float> x, float* out) const {
  const auto f = static_cast<size_t>(spec_.features);
  const auto h = static_cast<size_t>(spec_.hidden);
  const auto c = static_cast<size_t>(spec_.outputs);
  if (x.size() != f) {
    throw std::invalid_argument("teacher-regression dataset: targets() needs " + std::to_string(f) +
                                " values, got " + std::to_string(x.size()));
  }
  std::vector<double> hid(b1_);
  for (size_t k = 0; k < f; ++k) {
    const double xk = x[k];
    const double* w = w1_.data() + k * h;
    for (size_t j = 0; j < h; ++j) hid[j] += w[j] * xk;
  }
  std::vector<double> y(c, 0.0);
  for (size_t j = 0; j < h; ++j) {
    const double hj = std::tanh(hid[j]);
    const double* w = w2_.data() + j * c;
    for (size_t m = 0; m < c; ++m) y[m] += w[m] * hj;
  }
  for (size_t m = 0; m < c; ++m) out[m] = static_cast<float>(y[m]);
}

Batch TeacherRegression::get(std::span<const int64_t> indices) const {
  check_indices(indices);
  const auto b = static_cast<int64_t>(indices.size());
  Batch batch{Tensor::empty({b, spec_.features}, DType::f32),
              Tensor::empty({b, spec_.outputs}, DType::f32)};
  float* x = batch.inputs.data<float>();
  float* y = batch.targets.data<float>();
  const auto f = static_cast<size_t>(spec_.features);
  const auto c = static_cast<size_t>(spec_.outputs);
  for (size_t i = 0; i < indices.size(); ++i) {
    float* xi = x + i * f;
    // The classification teacher's input stream: the same seed gives the same inputs.
    auto rng =
        RngStream::from_key(stream_key(spec_.seed, split_, static_cast<uint64_t>(indices[i])));
    for (size_t k = 0; k < f; ++k) xi[k] = static_cast<float>(rng.normal());
    targets(std::span<const float>(xi, f), y + i * c);
  }
  return batch;
}

std::string TeacherRegression::describe() const {
  return "teacher-regression(features=" + std::to_string(spec_.features) +
         ", hidden=" + std::to_string(spec_.hidden) + ", outputs=" + std::to_string(spec_.outputs) +
         ", seed=" + std::to_string(spec_.seed) + ", split=" + std::to_string(split_) +
         ", samples=" + std::to_string(samples_) + ")";
}

}  // namespace tandem::models::data
