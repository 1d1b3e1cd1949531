#include "models/kernels/cpu/elementwise.hpp"

#include <cmath>

#include "models/kernels/cpu/math.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/cpu/vectorize.hpp"

namespace tandem::models::cpu {
namespace {

TANDEM_VECTOR_CLONES
void multiply_range(const float* a, const float* b, float alpha, float beta, float* out,
                    std::int64_t n) {
  if (beta == 0.0f) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = alpha * a[i] * b[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = alpha * a[i] * b[i] + beta * out[i];
  }
}

TANDEM_VECTOR_CLONES
void exp_range(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = exp_full(x[i]);
}

// std::log stays a scalar call: GCC vectorises it only under -ffast-math.
void log_range(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = std::log(x[i]);
}

TANDEM_VECTOR_CLONES
void fill_range(float* x, std::int64_t n, float value) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = value;
}

}  // namespace

void multiply(const float* a, const float* b, float alpha, float beta, float* out, std::int64_t n) {
  parallel_for(n, kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
    multiply_range(a + i0, b + i0, alpha, beta, out + i0, i1 - i0);
  });
}

void exp(const float* x, float* y, std::int64_t n) {
  parallel_for(n, kElementGrain,
               [&](std::int64_t i0, std::int64_t i1) { exp_range(x + i0, y + i0, i1 - i0); });
}

void log(const float* x, float* y, std::int64_t n) {
  parallel_for(n, kElementGrain,
               [&](std::int64_t i0, std::int64_t i1) { log_range(x + i0, y + i0, i1 - i0); });
}

void fill(float* x, std::int64_t n, float value) {
  parallel_for(n, kElementGrain,
               [&](std::int64_t i0, std::int64_t i1) { fill_range(x + i0, i1 - i0, value); });
}

}  // namespace tandem::models::cpu
