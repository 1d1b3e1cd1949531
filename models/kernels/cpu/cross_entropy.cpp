#include "models/kernels/cpu/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/kernels/cpu/math.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/cpu/vectorize.hpp"

namespace tandem::models::cpu {
namespace {

// One row: returns -log softmax(z)[t]; e receives exp(z - max) (then the gradient when
// `gradient`); *arg the first maximum.
TANDEM_VECTOR_CLONES
double row_loss(const float* z, std::int64_t classes, std::int32_t t, float* e, bool gradient,
                float scale, std::int64_t* arg) {
  const float mx = lane_max(z, classes);
  std::int64_t a = 0;
  while (a + 1 < classes && z[a] != mx) ++a;  // bounded: a NaN matches nothing
  *arg = a;
  for (std::int64_t c = 0; c < classes; ++c) e[c] = fast_exp(z[c] - mx);
  const float sum = lane_sum(e, classes);
  if (gradient) {
    const float inv = scale / sum;
    for (std::int64_t c = 0; c < classes; ++c) e[c] *= inv;
    e[t] -= scale;
  }
  return static_cast<double>(std::log(sum)) - static_cast<double>(z[t] - mx);
}

}  // namespace

CrossEntropySums cross_entropy(const float* logits, const std::int32_t* targets, std::int64_t rows,
                               std::int64_t classes, float* dlogits, float scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    if (targets[r] < 0 || targets[r] >= classes) {
      throw std::out_of_range("softmax_cross_entropy: target " + std::to_string(targets[r]) +
                              " at row " + std::to_string(r) + " outside [0, " +
                              std::to_string(classes) + ")");
    }
  }
  // Fixed chunks of rows with partial sums added in order: thread-count independent.
  constexpr std::int64_t kChunk = 64;
  const std::int64_t chunks = (rows + kChunk - 1) / kChunk;
  std::vector<double> loss(static_cast<std::size_t>(chunks), 0.0);
  std::vector<std::int64_t> correct(static_cast<std::size_t>(chunks), 0);
  const std::int64_t grain =
      std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(1, classes * kChunk));
  parallel_for(chunks, grain, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k) {
      const std::int64_t r1 = std::min(rows, (k + 1) * kChunk);
      std::vector<float> scratch(dlogits == nullptr ? static_cast<std::size_t>(classes) : 0);
      for (std::int64_t r = k * kChunk; r < r1; ++r) {
        const std::int32_t t = targets[r];
        float* e = dlogits != nullptr ? dlogits + r * classes : scratch.data();
        std::int64_t arg = 0;
        loss[k] += row_loss(logits + r * classes, classes, t, e, dlogits != nullptr, scale, &arg);
        correct[k] += arg == t ? 1 : 0;
      }
    }
  });
  CrossEntropySums out;
  for (std::int64_t k = 0; k < chunks; ++k) {
    out.loss_sum += loss[k];
    out.correct += correct[k];
  }
  return out;
}

}  // namespace tandem::models::cpu
