#include "models/data/teacher_classification.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runtime/counter_rng.hpp"

namespace tandem::models::data {
namespace {

constexpr uint64_t kTeacherStream = 0x7eac4e5;
constexpr uint64_t kCalibrationSplit = ~uint64_t{0};
constexpr int64_t kCalibrationSamples = 4096;

void fill_normal(uint64_t seed, uint64_t split, int64_t index, int64_t n, float* x) {
  auto rng = RngStream::from_key(stream_key(seed, split, static_cast<uint64_t>(index)));
  for (int64_t k = 0; k < n; ++k) x[k] = static_cast<float>(rng.normal());
}

}  // namespace

TeacherClassification::TeacherClassification(const TeacherSpec& spec, int64_t samples,
                                             uint64_t split)
    : spec_(spec), samples_(samples), split_(split) {
  if (spec.features < 1 || spec.hidden < 1 || spec.classes < 2 || samples < 0) {
    throw std::invalid_argument(
        "teacher dataset: needs features >= 1, hidden >= 1, classes >= 2, samples >= 0");
  }
  auto rng = RngStream::from_key(stream_key(spec.seed, kTeacherStream, 0));
  const auto f = static_cast<size_t>(spec.features);
  const auto h = static_cast<size_t>(spec.hidden);
  const auto c = static_cast<size_t>(spec.classes);
  w1_.resize(h * f);
  b1_.resize(h);
  w2_.resize(c * h);
  b2_.assign(c, 0.0);
  // Pre-activations of unit variance keep tanh in its curved range: boundaries are smooth
  // but not linear. Drawn row by row ([hidden, features], [classes, hidden]) and stored
  // transposed, so that scores() runs independent sums side by side (see there).
  for (size_t j = 0; j < h; ++j) {
    for (size_t k = 0; k < f; ++k)
      w1_[k * h + j] = rng.normal() / std::sqrt(static_cast<double>(f));
  }
  for (auto& b : b1_) b = 0.5 * rng.normal();
  for (size_t m = 0; m < c; ++m) {
    for (size_t j = 0; j < h; ++j)
      w2_[j * c + m] = rng.normal() / std::sqrt(static_cast<double>(h));
  }

  // Centre each class score over a calibration sample so no class dominates the argmax.
  std::vector<double> mean(c, 0.0), score(c);
  std::vector<float> x(f);
  for (int64_t i = 0; i < kCalibrationSamples; ++i) {
    fill_normal(spec.seed, kCalibrationSplit, i, spec.features, x.data());
    scores(x, score.data());
    for (size_t m = 0; m < c; ++m) mean[m] += score[m] / kCalibrationSamples;
  }
  for (size_t m = 0; m < c; ++m) b2_[m] = -mean[m];
  cache_ = samples > 0 && samples <= kCacheBytes / 4 / spec.features;
}

void TeacherClassification::scores(std::span<const float> x, double* out) const {
  const auto f = static_cast<size_t>(spec_.features);
  const auto h = static_cast<size_t>(spec_.hidden);
  const auto c = static_cast<size_t>(spec_.classes);
  // Every unit's sum runs over its inputs in order, as a dot product per unit would, but the
  // units' sums advance together (k outer, units inner), so they vectorize and no sum waits on
  // its own previous addition: the same values, several times faster than one unit at a time.
  std::vector<double> hid(b1_);
  for (size_t k = 0; k < f; ++k) {
    const double xk = x[k];
    const double* w = w1_.data() + k * h;
    for (size_t j = 0; j < h; ++j) hid[j] += w[j] * xk;
  }
  for (size_t j = 0; j < h; ++j) hid[j] = std::tanh(hid[j]);
  for (size_t m = 0; m < c; ++m) out[m] = b2_[m];
  for (size_t j = 0; j < h; ++j) {
    const double hj = hid[j];
    const double* w = w2_.data() + j * c;
    for (size_t m = 0; m < c; ++m) out[m] += w[m] * hj;
  }
}

int32_t TeacherClassification::label(std::span<const float> x) const {
  if (static_cast<int64_t>(x.size()) != spec_.features) {
    throw std::invalid_argument("teacher dataset: label() needs " + std::to_string(spec_.features) +
                                " values, got " + std::to_string(x.size()));
  }
  std::vector<double> s(static_cast<size_t>(spec_.classes));
  scores(x, s.data());
  int32_t best = 0;
  for (size_t m = 1; m < s.size(); ++m) {
    if (s[m] > s[static_cast<size_t>(best)]) best = static_cast<int32_t>(m);
  }
  return best;
}

Batch TeacherClassification::get(std::span<const int64_t> indices) const {
  check_indices(indices);
  const auto b = static_cast<int64_t>(indices.size());
  Batch batch{Tensor::empty({b, spec_.features}, DType::f32), Tensor::empty({b}, DType::i32)};
  float* x = batch.inputs.data<float>();
  int32_t* y = batch.targets.data<int32_t>();
  const auto f = static_cast<size_t>(spec_.features);
  std::unique_lock<std::mutex> lock(cache_mu_, std::defer_lock);
  if (cache_) {
    lock.lock();
    if (cached_y_.empty()) {
      cached_x_.resize(static_cast<size_t>(samples_) * f);
      cached_y_.assign(static_cast<size_t>(samples_), -1);
    }
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    float* xi = x + i * f;
    const auto at = static_cast<size_t>(indices[i]);
    if (cache_ && cached_y_[at] >= 0) {
      std::copy_n(cached_x_.data() + at * f, f, xi);
      y[i] = cached_y_[at];
      continue;
    }
    fill_normal(spec_.seed, split_, indices[i], spec_.features, xi);
    y[i] = label(std::span<const float>(xi, f));
    if (cache_) {
      std::copy_n(xi, f, cached_x_.data() + at * f);
      cached_y_[at] = y[i];
    }
  }
  return batch;
}

std::string TeacherClassification::describe() const {
  return "teacher(features=" + std::to_string(spec_.features) +
         ", hidden=" + std::to_string(spec_.hidden) + ", classes=" + std::to_string(spec_.classes) +
         ", seed=" + std::to_string(spec_.seed) + ", split=" + std::to_string(split_) +
         ", samples=" + std::to_string(samples_) + ")";
}

}  // namespace tandem::models::data
