#pragma once
// Helpers of the tests of the public kernels (kernels_test.cpp) and of the gated custom layer
// (gated_layer_test.cpp): random tensors, errors relative to the largest wanted value, the
// message of a refusal, and short training runs through tandem::Session. Public headers only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tandem/tandem.hpp"

namespace tandem::api_test {

// max |got - want| over max |want|; inf when the sizes differ or either side is not finite.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (got.size() != want.size()) return kInf;
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return kInf;
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return scale == 0 ? (err == 0 ? 0 : kInf) : err / scale;
}

// Uniform in [lo, hi).
inline std::vector<float> random_values(std::int64_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

inline Tensor random_tensor(Shape shape, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v = random_values(shape_numel(shape), seed, lo, hi);
  return Tensor::from_vector(v, std::move(shape));
}

// The message of the refusal `call` throws (std::invalid_argument from the model builders and
// kernels, tandem::Error from a Session), or "" when it throws none.
template <class F>
std::string refusal(F&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const tandem::Error& e) {
    return e.what();
  }
  return "";
}

inline constexpr std::int64_t kFeatures = 8;
inline constexpr std::int64_t kClasses = 4;
inline constexpr std::int64_t kMinibatch = 16;

// Minibatch b: normal features, labelled by which of the first kClasses is largest.
inline Batch make_batch(std::int64_t b) {
  std::mt19937 gen(static_cast<std::uint32_t>(100 + b));
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(kMinibatch * kFeatures));
  std::vector<std::int32_t> y(static_cast<std::size_t>(kMinibatch));
  for (float& v : x) v = normal(gen);
  for (std::int64_t r = 0; r < kMinibatch; ++r) {
    const float* row = &x[static_cast<std::size_t>(r * kFeatures)];
    y[static_cast<std::size_t>(r)] =
        static_cast<std::int32_t>(std::max_element(row, row + kClasses) - row);
  }
  return {Tensor::from_vector(x, {kMinibatch, kFeatures}), Tensor::from_vector(y, {kMinibatch})};
}

// linear(kFeatures -> width, relu), custom, linear(width -> kClasses).
inline Model model_with(LayerPtr custom, std::int64_t width) {
  return Model::classifier(kFeatures, {layers::linear(kFeatures, width, layers::Activation::relu),
                                       std::move(custom), layers::linear(width, kClasses)});
}

struct Trained {
  std::vector<double> losses;
  std::vector<float> weights;  // all of them, in order
};

// `minibatches` minibatches of two slices through one stage on `device`.
inline Trained train(const Model& model, const std::string& device, std::int64_t minibatches) {
  TrainOptions o;
  o.plan.stages = {{0, model.num_layers(), {Device::parse(device)}}};
  o.plan.schedule = Schedule::one_f_one_b;
  o.plan.minibatch = kMinibatch;
  o.plan.slices = 2;
  o.minibatches = minibatches;
  o.optimizer = SgdOptions{.lr = 0.1, .momentum = 0.9};
  o.seed = 11;
  o.data = make_batch;
  o.threads = 2;
  Session session(model, std::move(o));
  Trained t;
  t.losses = session.run().losses;
  for (const NamedTensor& w : session.weights()) {
    const std::vector<float> v = w.value.to_float_vector();
    t.weights.insert(t.weights.end(), v.begin(), v.end());
  }
  return t;
}

// The bounds of tests/api/custom_layer_test.cpp: 1e-5 on losses, 1e-4 on weights.
inline void expect_trained_alike(const Trained& got, const Trained& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::max(1.0, std::fabs(want.losses[i])))
        << "minibatch " << i;
  }
  EXPECT_LE(rel_error(got.weights, want.weights), 1e-4);
}

}  // namespace tandem::api_test
