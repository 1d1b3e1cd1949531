#include "models/kernels/cpu/batch_norm.hpp"

#include <algorithm>
#include <cmath>

#include "models/kernels/cpu/threading.hpp"

namespace tandem::models::cpu {
namespace {

// Channels per task: each channel reads n * hw elements.
std::int64_t channel_grain(std::int64_t n, std::int64_t hw) {
  return std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(1, n * hw));
}

}  // namespace

void batch_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* xhat, float* rstd, float* sums, std::int64_t n, std::int64_t c,
                        std::int64_t hw, float eps) {
  const std::int64_t m = n * hw;
  parallel_for(c, channel_grain(n, hw), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t ch = c0; ch < c1; ++ch) {
      double s = 0;
      double q = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const float* p = x + (i * c + ch) * hw;
        for (std::int64_t e = 0; e < hw; ++e) {
          s += p[e];
          q += static_cast<double>(p[e]) * p[e];
        }
      }
      const double mean = m > 0 ? s / static_cast<double>(m) : 0.0;
      // The variance around the mean (a second pass): sum x^2 / m - mean^2 cancels badly.
      double d2 = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const float* p = x + (i * c + ch) * hw;
        for (std::int64_t e = 0; e < hw; ++e) d2 += (p[e] - mean) * (p[e] - mean);
      }
      const double var = m > 0 ? d2 / static_cast<double>(m) : 0.0;
      const auto r = static_cast<float>(1.0 / std::sqrt(var + eps));
      const auto mf = static_cast<float>(mean);
      rstd[ch] = r;
      sums[ch] = static_cast<float>(s);
      sums[c + ch] = static_cast<float>(q);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t at = (i * c + ch) * hw;
        for (std::int64_t e = 0; e < hw; ++e) {
          const float h = (x[at + e] - mf) * r;
          xhat[at + e] = h;
          y[at + e] = gamma[ch] * h + beta[ch];
        }
      }
    }
  });
  sums[2 * c] = static_cast<float>(m);
}

void batch_norm_inference(const float* x, const float* gamma, const float* beta, const float* mean,
                          const float* var, float* y, std::int64_t n, std::int64_t c,
                          std::int64_t hw, float eps) {
  parallel_for(c, channel_grain(n, hw), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t ch = c0; ch < c1; ++ch) {
      const auto r = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[ch]) + eps));
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t at = (i * c + ch) * hw;
        for (std::int64_t e = 0; e < hw; ++e) {
          y[at + e] = gamma[ch] * ((x[at + e] - mean[ch]) * r) + beta[ch];
        }
      }
    }
  });
}

void batch_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                               const float* gamma, float* dx, std::int64_t n, std::int64_t c,
                               std::int64_t hw) {
  const std::int64_t m = n * hw;
  parallel_for(c, channel_grain(n, hw), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t ch = c0; ch < c1; ++ch) {
      double sd = 0;
      double sdx = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t at = (i * c + ch) * hw;
        for (std::int64_t e = 0; e < hw; ++e) {
          sd += dy[at + e];
          sdx += static_cast<double>(dy[at + e]) * xhat[at + e];
        }
      }
      const auto mean_dy = static_cast<float>(m > 0 ? sd / static_cast<double>(m) : 0.0);
      const auto mean_dyx = static_cast<float>(m > 0 ? sdx / static_cast<double>(m) : 0.0);
      const float scale = gamma[ch] * rstd[ch];
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t at = (i * c + ch) * hw;
        for (std::int64_t e = 0; e < hw; ++e) {
          dx[at + e] = scale * (dy[at + e] - mean_dy - xhat[at + e] * mean_dyx);
        }
      }
    }
  });
}

void batch_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                std::int64_t n, std::int64_t c, std::int64_t hw, float alpha,
                                float beta) {
  parallel_for(c, channel_grain(n, hw), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t ch = c0; ch < c1; ++ch) {
      double sd = 0;
      double sdx = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t at = (i * c + ch) * hw;
        for (std::int64_t e = 0; e < hw; ++e) {
          sd += dy[at + e];
          sdx += static_cast<double>(dy[at + e]) * xhat[at + e];
        }
      }
      const float g = alpha * static_cast<float>(sdx);
      const float b = alpha * static_cast<float>(sd);
      dgamma[ch] = beta == 0.0f ? g : g + beta * dgamma[ch];
      dbeta[ch] = beta == 0.0f ? b : b + beta * dbeta[ch];
    }
  });
}

void batch_norm_update_running(const float* sum, const float* sum_sq, const float* count,
                               const float* mean, const float* var, const float* updates,
                               float* mean_out, float* var_out, float* updates_out, std::int64_t c,
                               float momentum) {
  const float m = count[0];
  if (!(m > 0.0f)) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      mean_out[ch] = mean[ch];
      var_out[ch] = var[ch];
    }
    updates_out[0] = updates[0];
    return;
  }
  const float correction = m > 1.0f ? m / (m - 1.0f) : 1.0f;
  for (std::int64_t ch = 0; ch < c; ++ch) {
    const float mb = sum[ch] / m;
    const float vb = (sum_sq[ch] / m - mb * mb) * correction;
    mean_out[ch] = (1.0f - momentum) * mean[ch] + momentum * mb;
    var_out[ch] = (1.0f - momentum) * var[ch] + momentum * vb;
  }
  updates_out[0] = updates[0] + 1.0f;
}

}  // namespace tandem::models::cpu
