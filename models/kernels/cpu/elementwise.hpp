#pragma once

#include <cstdint>

// Element-wise maths over n floats (the public Kernels' multiply, exp, log and fill for
// layers of one's own). Outputs may alias inputs element for element.
namespace tandem::models::cpu {

// out[i] = alpha * a[i] * b[i] + beta * out[i]; beta = 0 never reads out. out may alias a or b.
void multiply(const float* a, const float* b, float alpha, float beta, float* out, std::int64_t n);

// y[i] = e^x[i] (math.hpp's exp_full: about 4 ulp, inf and 0 beyond f32's range); y may alias x.
void exp(const float* x, float* y, std::int64_t n);

// y[i] = ln x[i] (the C library's logf: -inf at 0, NaN below); y may alias x.
void log(const float* x, float* y, std::int64_t n);

// x[i] = value.
void fill(float* x, std::int64_t n, float value);

}  // namespace tandem::models::cpu
