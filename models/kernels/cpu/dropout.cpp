#include "models/kernels/cpu/dropout.hpp"

#include "models/kernels/cpu/threading.hpp"
#include "runtime/counter_rng.hpp"

namespace tandem::models::cpu {

void dropout_apply(const float* x, float* y, std::int64_t samples, std::int64_t per_sample, float p,
                   std::uint64_t key, std::int64_t first_sample) {
  const float keep_scale = 1.0f / (1.0f - p);
  const std::int64_t n = samples * per_sample;
  const auto base = static_cast<std::uint64_t>(first_sample * per_sample);
  parallel_for(n, kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const float u = counter_uniform_f32(key, base + static_cast<std::uint64_t>(i));
      y[i] = u >= p ? x[i] * keep_scale : 0.0f;
    }
  });
}

}  // namespace tandem::models::cpu
