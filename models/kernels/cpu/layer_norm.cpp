#include "models/kernels/cpu/layer_norm.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "models/kernels/cpu/reduce.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/cpu/vectorize.hpp"

namespace tandem::models::cpu {
namespace {

std::int64_t row_grain(std::int64_t cols) {
  return std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(cols, 1));
}

TANDEM_VECTOR_CLONES
void forward_rows(const float* x, const float* gamma, const float* beta, float* y, float* xhat,
                  float* rstd, std::int64_t r0, std::int64_t r1, std::int64_t cols, float eps) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * cols;
    const float mean = lane_sum(xr, cols) / static_cast<float>(cols);
    float* hr = xhat + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) hr[c] = xr[c] - mean;
    const float rs = 1.0f / std::sqrt(lane_dot(hr, hr, cols) / static_cast<float>(cols) + eps);
    rstd[r] = rs;
    float* yr = y + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) {
      hr[c] *= rs;
      yr[c] = hr[c] * gamma[c] + beta[c];
    }
  }
}

TANDEM_VECTOR_CLONES
void backward_input_rows(const float* dy, const float* xhat, const float* rstd, const float* gamma,
                         float* dx, std::int64_t r0, std::int64_t r1, std::int64_t cols) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* dyr = dy + r * cols;
    const float* hr = xhat + r * cols;
    float* dxr = dx + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) dxr[c] = dyr[c] * gamma[c];  // g, kept in dx
    const float mean_g = lane_sum(dxr, cols) / static_cast<float>(cols);
    const float mean_gh = lane_dot(dxr, hr, cols) / static_cast<float>(cols);
    const float rs = rstd[r];
    for (std::int64_t c = 0; c < cols; ++c) dxr[c] = rs * (dxr[c] - mean_g - hr[c] * mean_gh);
  }
}

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* xhat, float* rstd, std::int64_t rows, std::int64_t cols, float eps) {
  parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
    forward_rows(x, gamma, beta, y, xhat, rstd, r0, r1, cols, eps);
  });
}

void layer_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                               const float* gamma, float* dx, std::int64_t rows,
                               std::int64_t cols) {
  parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
    backward_input_rows(dy, xhat, rstd, gamma, dx, r0, r1, cols);
  });
}

void layer_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                std::int64_t rows, std::int64_t cols, float alpha, float beta) {
  const std::int64_t chunks = (rows + kReduceRows - 1) / kReduceRows;
  const auto size = static_cast<std::size_t>(std::max<std::int64_t>(chunks, 1) * cols);
  std::vector<float> pg(size, 0.0f);
  std::vector<float> pb(size, 0.0f);
  parallel_for(chunks, 1, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k) {
      float* ag = pg.data() + k * cols;
      float* ab = pb.data() + k * cols;
      const std::int64_t r1 = std::min(rows, (k + 1) * kReduceRows);
      for (std::int64_t r = k * kReduceRows; r < r1; ++r) {
        const float* dyr = dy + r * cols;
        const float* hr = xhat + r * cols;
        for (std::int64_t c = 0; c < cols; ++c) {
          ag[c] += dyr[c] * hr[c];
          ab[c] += dyr[c];
        }
      }
    }
  });
  combine_partials(pg.data(), chunks, cols, alpha, beta, dgamma);
  combine_partials(pb.data(), chunks, cols, alpha, beta, dbeta);
}

}  // namespace tandem::models::cpu
