#include "models/kernels/cpu/reduce.hpp"

#include <algorithm>
#include <vector>

#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/cpu/vectorize.hpp"

namespace tandem::models::cpu {

void combine_partials(const float* partials, std::int64_t chunks, std::int64_t cols, float alpha,
                      float beta, float* out) {
  parallel_for(cols, 4096, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      float s = 0.0f;
      for (std::int64_t k = 0; k < chunks; ++k) s += partials[k * cols + c];
      out[c] = beta == 0.0f ? alpha * s : alpha * s + beta * out[c];
    }
  });
}

void column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
                float* out) {
  const std::int64_t chunks = (rows + kReduceRows - 1) / kReduceRows;
  std::vector<float> partials(static_cast<std::size_t>(std::max<std::int64_t>(chunks, 1) * cols),
                              0.0f);
  const std::int64_t grain =
      std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(1, cols * kReduceRows));
  parallel_for(chunks, grain, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k) {
      float* acc = partials.data() + k * cols;
      const std::int64_t r1 = std::min(rows, (k + 1) * kReduceRows);
      for (std::int64_t r = k * kReduceRows; r < r1; ++r) {
        const float* row = x + r * cols;
        for (std::int64_t c = 0; c < cols; ++c) acc[c] += row[c];
      }
    }
  });
  combine_partials(partials.data(), chunks, cols, alpha, beta, out);
}

float sum_squares(const float* x, std::int64_t n) {
  const std::int64_t chunks = (n + kElementGrain - 1) / kElementGrain;
  std::vector<double> partials(static_cast<std::size_t>(std::max<std::int64_t>(chunks, 1)), 0.0);
  parallel_for(chunks, 1, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k) {
      const std::int64_t i1 = std::min(n, (k + 1) * kElementGrain);
      double acc = 0.0;
      for (std::int64_t i = k * kElementGrain; i < i1; ++i) {
        const double v = x[i];
        acc += v * v;
      }
      partials[static_cast<std::size_t>(k)] = acc;
    }
  });
  double total = 0.0;
  for (const double p : partials) total += p;
  return static_cast<float>(total);
}

void row_max(const float* x, std::int64_t rows, std::int64_t cols, float* out) {
  if (cols <= 0) return;
  const std::int64_t grain = std::max<std::int64_t>(1, kElementGrain / cols);
  parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) out[r] = lane_max(x + r * cols, cols);
  });
}

}  // namespace tandem::models::cpu
