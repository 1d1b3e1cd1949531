#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace tandem::models::cpu {

// exp(x) for f32 with about 2 ulp error, written so that GCC vectorises loops calling it
// (std::exp is a scalar library call). Clamps x to [-86.5, 88].
inline float fast_exp(float x) {
  x = std::min(std::max(x, -86.5f), 88.0f);  // keeps the result a normal float
  constexpr float kRound = 12582912.0f;      // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;  // round(x / ln 2)
  // Cody-Waite: ln 2 = hi + lo with hi exact in few bits, so n * hi and x - n * hi are exact.
  const float f = (x - n * 0.693359375f) - n * -2.12194440e-4f;  // in [-ln2/2, ln2/2]
  // e^f by its Taylor series to degree 7 (error < 1e-8 on this range).
  float p = 1.0f / 5040.0f;
  p = p * f + 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  const std::int32_t e = static_cast<std::int32_t>(n) << 23;
  return std::bit_cast<float>(std::bit_cast<std::int32_t>(p) + e);
}

// GELU, tanh form (GPT-2): 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3).
inline constexpr float kGeluC = 0.7978845608028654f;
inline constexpr float kGeluA = 0.044715f;

inline float gelu(float x) {
  const float u2 = 2.0f * kGeluC * (x + kGeluA * x * x * x);
  return x / (1.0f + fast_exp(-u2));
}

inline float gelu_grad(float x) {
  const float u2 = 2.0f * kGeluC * (x + kGeluA * x * x * x);
  const float s = 1.0f / (1.0f + fast_exp(-u2));
  const float du2 = 2.0f * kGeluC * (1.0f + 3.0f * kGeluA * x * x);
  return s + x * s * (1.0f - s) * du2;
}

// 1 / (1 + e^-x); exact 0 and 1 only where f32 rounds there.
inline float sigmoid(float x) {
  return 1.0f / (1.0f + fast_exp(-x));
}

// tanh(x) = sign(x) (1 - t) / (1 + t), t = e^-2|x| (no overflow); below |x| = 1/4, where 1 - t
// would cancel, its Taylor series to x^9 (error < 1e-8 relative). About 4 ulp overall.
inline float fast_tanh(float x) {
  const float a = std::abs(x);
  const float t = fast_exp(-2.0f * a);
  const float big = (1.0f - t) / (1.0f + t);
  const float a2 = a * a;
  float p = 62.0f / 2835.0f;
  p = p * a2 - 17.0f / 315.0f;
  p = p * a2 + 2.0f / 15.0f;
  p = p * a2 - 1.0f / 3.0f;
  const float small = a + a * a2 * p;
  const float r = a < 0.25f ? small : big;
  return x < 0.0f ? -r : r;
}

// e^x over the whole f32 range, vectorisable: fast_exp(x / 2) squared, so that x beyond fast_exp's
// clamp overflows to inf or underflows to 0 as std::exp does (about 4 ulp).
inline float exp_full(float x) {
  const float h = fast_exp(0.5f * x);
  return h * h;
}

}  // namespace tandem::models::cpu
