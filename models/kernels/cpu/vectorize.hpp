#pragma once

#include <algorithm>
#include <cstdint>

// Hot element-wise loops are compiled for AVX-512, AVX2 and baseline x86-64 and the best one is
// picked at load time (GCC function multi-versioning), so the library stays portable without
// -march. A machine always runs the same version, so results are reproducible on it; versions
// may differ in the last bits (the AVX-512 one contracts multiply-adds into FMAs). Reductions
// use the fixed 16-lane order below rather than one the compiler picks.
// Sanitized builds skip it: the load-time resolvers run before the sanitizer runtime starts
// and crash in its instrumentation.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define TANDEM_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TANDEM_VECTOR_CLONES
#endif

namespace tandem::models::cpu {

inline constexpr int kLanes = 16;

// Sums with 16 independent partial sums (vectorisable without reassociation flags; the order
// is fixed, so every build and thread count gives the same bits).
inline float lane_sum(const float* x, std::int64_t n) {
  float acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += x[i];
  float s = 0.0f;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

inline float lane_dot(const float* a, const float* b, std::int64_t n) {
  float acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  float s = 0.0f;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

inline float lane_max(const float* x, std::int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = x[0];
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] = acc[j] > x[i + j] ? acc[j] : x[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] = acc[j] > x[i] ? acc[j] : x[i];
  float m = acc[0];
  for (int j = 1; j < kLanes; ++j) m = m > acc[j] ? m : acc[j];
  return m;
}

}  // namespace tandem::models::cpu
