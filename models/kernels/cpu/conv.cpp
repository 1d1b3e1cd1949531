#include "models/kernels/cpu/conv.hpp"

#include <algorithm>
#include <cstring>

#include "models/kernels/cpu/threading.hpp"

namespace tandem::models::cpu {

void im2col(const float* x, const ConvGeometry& g, std::int64_t n, float* col) {
  const std::int64_t oh = g.out_h();
  const std::int64_t ow = g.out_w();
  const std::int64_t ohw = oh * ow;
  const std::int64_t k2 = g.kernel_h * g.kernel_w;
  const std::int64_t rows = g.col_rows();
  const std::int64_t grain =
      std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(1, n * ohw));
  parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t c = r / k2;
      const std::int64_t ki = (r % k2) / g.kernel_w;
      const std::int64_t kj = r % g.kernel_w;
      for (std::int64_t s = 0; s < n; ++s) {
        const float* plane = x + s * g.sample_size() + c * g.height * g.width;
        float* out = col + r * n * ohw + s * ohw;
        for (std::int64_t i = 0; i < oh; ++i) {
          const std::int64_t h = i * g.stride - g.pad_h + ki;
          float* orow = out + i * ow;
          if (h < 0 || h >= g.height) {
            std::memset(orow, 0, static_cast<std::size_t>(ow) * sizeof(float));
            continue;
          }
          const float* xrow = plane + h * g.width;
          if (g.stride == 1) {
            // w = j - pad + kj is in range for j in [j0, j1).
            const std::int64_t j0 = std::clamp<std::int64_t>(g.pad_w - kj, 0, ow);
            const std::int64_t j1 = std::clamp<std::int64_t>(g.width + g.pad_w - kj, j0, ow);
            for (std::int64_t j = 0; j < j0; ++j) orow[j] = 0.0f;
            for (std::int64_t j = j0; j < j1; ++j) orow[j] = xrow[j - g.pad_w + kj];
            for (std::int64_t j = j1; j < ow; ++j) orow[j] = 0.0f;
          } else {
            for (std::int64_t j = 0; j < ow; ++j) {
              const std::int64_t w = j * g.stride - g.pad_w + kj;
              orow[j] = (w >= 0 && w < g.width) ? xrow[w] : 0.0f;
            }
          }
        }
      }
    }
  });
}

void col2im(const float* col, const ConvGeometry& g, std::int64_t n, float* dx) {
  const std::int64_t oh = g.out_h();
  const std::int64_t ow = g.out_w();
  const std::int64_t ohw = oh * ow;
  const std::int64_t hw = g.height * g.width;
  // One task per (sample, channel) plane: it alone writes that plane of dx.
  const std::int64_t grain = std::max<std::int64_t>(
      1, kElementGrain / std::max<std::int64_t>(1, hw * g.kernel_h * g.kernel_w));
  parallel_for(n * g.channels, grain, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t s = p / g.channels;
      const std::int64_t c = p % g.channels;
      float* plane = dx + s * g.sample_size() + c * hw;
      std::memset(plane, 0, static_cast<std::size_t>(hw) * sizeof(float));
      for (std::int64_t ki = 0; ki < g.kernel_h; ++ki) {
        for (std::int64_t kj = 0; kj < g.kernel_w; ++kj) {
          const std::int64_t r = (c * g.kernel_h + ki) * g.kernel_w + kj;
          const float* in = col + r * n * ohw + s * ohw;
          for (std::int64_t i = 0; i < oh; ++i) {
            const std::int64_t h = i * g.stride - g.pad_h + ki;
            if (h < 0 || h >= g.height) continue;
            float* xrow = plane + h * g.width;
            const float* irow = in + i * ow;
            for (std::int64_t j = 0; j < ow; ++j) {
              const std::int64_t w = j * g.stride - g.pad_w + kj;
              if (w >= 0 && w < g.width) xrow[w] += irow[j];
            }
          }
        }
      }
    }
  });
}

void nchw_to_cm(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw, float* out) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(1, hw));
  parallel_for(n * c, grain, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t s = p / c;
      const std::int64_t ch = p % c;
      std::memcpy(out + (ch * n + s) * hw, x + p * hw,
                  static_cast<std::size_t>(hw) * sizeof(float));
    }
  });
}

void cm_to_nchw(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw, float* out) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(1, hw));
  parallel_for(n * c, grain, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t s = p / c;
      const std::int64_t ch = p % c;
      std::memcpy(out + p * hw, x + (ch * n + s) * hw,
                  static_cast<std::size_t>(hw) * sizeof(float));
    }
  });
}

void max_pool_forward(const float* x, const ConvGeometry& g, std::int64_t n, float* y,
                      std::int32_t* argmax) {
  const std::int64_t oh = g.out_h();
  const std::int64_t ow = g.out_w();
  const std::int64_t hw = g.height * g.width;
  const std::int64_t grain =
      std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(1, hw));
  parallel_for(n * g.channels, grain, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const float* plane = x + p * hw;
      float* out = y + p * oh * ow;
      std::int32_t* arg = argmax + p * oh * ow;
      for (std::int64_t i = 0; i < oh; ++i) {
        // The window's rows and columns inside the plane (never empty: pad <= kernel / 2).
        const std::int64_t h0 = std::max<std::int64_t>(0, i * g.stride - g.pad_h);
        const std::int64_t h1 = std::min(g.height, i * g.stride - g.pad_h + g.kernel_h);
        for (std::int64_t j = 0; j < ow; ++j) {
          const std::int64_t w0 = std::max<std::int64_t>(0, j * g.stride - g.pad_w);
          const std::int64_t w1 = std::min(g.width, j * g.stride - g.pad_w + g.kernel_w);
          std::int64_t best = h0 * g.width + w0;
          float value = plane[best];
          for (std::int64_t h = h0; h < h1; ++h) {
            for (std::int64_t w = w0; w < w1; ++w) {
              const std::int64_t at = h * g.width + w;
              if (plane[at] > value) {
                value = plane[at];
                best = at;
              }
            }
          }
          out[i * ow + j] = value;
          arg[i * ow + j] = static_cast<std::int32_t>(best);
        }
      }
    }
  });
}

void max_pool_backward(const float* dy, const std::int32_t* argmax, const ConvGeometry& g,
                       std::int64_t n, float* dx) {
  const std::int64_t ohw = g.out_hw();
  const std::int64_t hw = g.height * g.width;
  const std::int64_t grain =
      std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(1, hw));
  parallel_for(n * g.channels, grain, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      float* plane = dx + p * hw;
      std::memset(plane, 0, static_cast<std::size_t>(hw) * sizeof(float));
      const float* g_out = dy + p * ohw;
      const std::int32_t* arg = argmax + p * ohw;
      for (std::int64_t o = 0; o < ohw; ++o) plane[arg[o]] += g_out[o];
    }
  });
}

}  // namespace tandem::models::cpu
