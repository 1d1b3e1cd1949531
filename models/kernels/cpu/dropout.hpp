#pragma once

#include <cstdint>

namespace tandem::models::cpu {

// Inverted dropout on [samples, per_sample]: keep element (s, j) when
// uniform(key, (first_sample + s) * per_sample + j) >= p, scaling kept ones by 1 / (1 - p).
// The mask is a pure function of its arguments, so backward recomputes it instead of storing.
void dropout_apply(const float* x, float* y, std::int64_t samples, std::int64_t per_sample, float p,
                   std::uint64_t key, std::int64_t first_sample);

}  // namespace tandem::models::cpu
