#pragma once
// Helpers of the GPU kernel tests (cuda_kernels_test.cpp, cuda_gemm_test.cpp,
// cuda_conv_test.cpp, the attention tests): the error norm, random inputs, moving vectors to and
// from cuda:0 through the runtime, and the attention's log-sum-exp reference. CUDA builds only; the
// tests include it under #if TANDEM_HAVE_CUDA.
//
// Error norm: max_i |gpu_i - ref_i| / max_i |ref_i|, the error relative to the largest reference
// magnitude, so elements near zero neither dominate nor escape. A NaN or infinity anywhere in
// either side, or a length mismatch, counts as an infinite error. Outputs are filled with NaN
// before each run, so an element a kernel leaves unwritten fails the comparison.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/stream.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models::cuda_test {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (got.size() != want.size()) return kInf;
  double err = 0;
  double scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return kInf;
    err = std::max(err, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return scale == 0 ? (err == 0 ? 0 : kInf) : err / scale;
}

inline std::vector<float> random_floats(std::int64_t n, std::uint32_t seed, float lo = -2.0f,
                                        float hi = 2.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// A cuda:0 tensor holding `values` (a blocking copy: complete before any kernel launches).
// Empty vectors get one element, so every pointer handed to a kernel is a real one.
inline Tensor upload(std::vector<float> values) {
  if (values.empty()) values.push_back(kNaN);
  const auto n = static_cast<std::int64_t>(values.size());
  Tensor t = Tensor::empty({n}, DType::f32, Device::cuda(0));
  t.copy_from(Tensor::from_vector(values, {n}));
  return t;
}

inline Tensor upload(std::vector<std::int32_t> values) {
  if (values.empty()) values.push_back(-1);
  const auto n = static_cast<std::int64_t>(values.size());
  Tensor t = Tensor::empty({n}, DType::i32, Device::cuda(0));
  t.copy_from(Tensor::from_vector(values, {n}));
  return t;
}

inline Tensor poisoned(std::int64_t n) {
  return Tensor::full({std::max<std::int64_t>(n, 1)}, kNaN, DType::f32, Device::cuda(0));
}

inline float* dev(Tensor& t) {
  return static_cast<float*>(t.raw_data());
}
inline const float* dev(const Tensor& t) {
  return static_cast<const float*>(t.raw_data());
}
inline std::int32_t* dev_ids(Tensor& t) {
  return static_cast<std::int32_t*>(t.raw_data());
}
inline const std::int32_t* dev_ids(const Tensor& t) {
  return static_cast<const std::int32_t*>(t.raw_data());
}

// Reads back after everything enqueued on the stream has run.
inline std::vector<float> download(const Tensor& t, Stream& stream) {
  stream.synchronize();
  return t.to_float_vector();
}
inline std::vector<std::int32_t> download_ids(const Tensor& t, Stream& stream) {
  stream.synchronize();
  return t.to_int_vector();
}

// log sum_{j <= i} exp(q_i . k_j / 8) of causal attention with heads of 64, in double, per
// [b, h, i], from packed qkv [batch, seq, 3 * heads * 64]: the reference of the fused kernels'
// log-sum-exp.
inline std::vector<float> reference_lse(const std::vector<float>& qkv, std::int64_t batch,
                                        std::int64_t seq, std::int64_t heads) {
  const std::int64_t d = heads * 64;
  std::vector<float> out(static_cast<std::size_t>(batch * heads * seq));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < seq; ++i) {
        std::vector<double> scores;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < 64; ++c) {
            dot += static_cast<double>(qkv[(b * seq + i) * 3 * d + h * 64 + c]) *
                   qkv[(b * seq + j) * 3 * d + d + h * 64 + c];
          }
          scores.push_back(dot / 8.0);
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double x : scores) sum += std::exp(x - m);
        out[static_cast<std::size_t>((b * heads + h) * seq + i)] =
            static_cast<float>(m + std::log(sum));
      }
    }
  }
  return out;
}

// The largest absolute difference (log-sum-exp is a log: absolute error is what matters).
inline double max_abs_diff(const std::vector<float>& got, const std::vector<float>& want) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (got.size() != want.size()) return kInf;
  double e = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return kInf;
    e = std::max(e, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  return e;
}

}  // namespace tandem::models::cuda_test
