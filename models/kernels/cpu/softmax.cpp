#include "models/kernels/cpu/softmax.hpp"

#include <algorithm>

#include "models/kernels/cpu/math.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/cpu/vectorize.hpp"

namespace tandem::models::cpu {
namespace {

std::int64_t row_grain(std::int64_t cols) {
  return std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(1, cols));
}

TANDEM_VECTOR_CLONES
void softmax_row(const float* x, float* y, std::int64_t cols) {
  const float mx = lane_max(x, cols);
  for (std::int64_t c = 0; c < cols; ++c) y[c] = fast_exp(x[c] - mx);
  const float inv = 1.0f / lane_sum(y, cols);
  for (std::int64_t c = 0; c < cols; ++c) y[c] *= inv;
}

TANDEM_VECTOR_CLONES
void softmax_backward_row(const float* y, const float* dy, float* dx, std::int64_t cols) {
  const float dot = lane_dot(y, dy, cols);
  for (std::int64_t c = 0; c < cols; ++c) dx[c] = y[c] * (dy[c] - dot);
}

}  // namespace

void softmax_forward(const float* x, float* y, std::int64_t rows, std::int64_t cols) {
  if (cols <= 0) return;
  parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) softmax_row(x + r * cols, y + r * cols, cols);
  });
}

void softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows,
                      std::int64_t cols) {
  if (cols <= 0) return;
  parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      softmax_backward_row(y + r * cols, dy + r * cols, dx + r * cols, cols);
    }
  });
}

}  // namespace tandem::models::cpu
