#include "models/kernels/cuda/conv.hpp"
#include "models/kernels/cuda/launch.cuh"

namespace tandem::models::cuda {
namespace {

// The scalars of ConvGeometry, by value: the struct's member functions are host code.
struct Geom {
  std::int64_t channels, height, width, kernel_h, kernel_w, stride, pad_h, pad_w, out_h, out_w;
};

Geom geom(const ConvGeometry& g) {
  return {g.channels, g.height, g.width, g.kernel_h, g.kernel_w,
          g.stride,   g.pad_h,  g.pad_w, g.out_h(),  g.out_w()};
}

#define TANDEM_GRID_STRIDE(i, n)                                                                   \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// One thread per col element, consecutive threads along output columns (coalesced writes).
__global__ void im2col_kernel(const float* x, Geom g, std::int64_t n, float* col) {
  const std::int64_t ohw = g.out_h * g.out_w;
  const std::int64_t k2 = g.kernel_h * g.kernel_w;
  const std::int64_t total = g.channels * k2 * n * ohw;
  TANDEM_GRID_STRIDE(idx, total) {
    const std::int64_t r = idx / (n * ohw);
    const std::int64_t rest = idx % (n * ohw);
    const std::int64_t s = rest / ohw;
    const std::int64_t i = (rest % ohw) / g.out_w;
    const std::int64_t j = rest % g.out_w;
    const std::int64_t c = r / k2;
    const std::int64_t ki = (r % k2) / g.kernel_w;
    const std::int64_t kj = r % g.kernel_w;
    const std::int64_t h = i * g.stride - g.pad_h + ki;
    const std::int64_t w = j * g.stride - g.pad_w + kj;
    const bool inside = h >= 0 && h < g.height && w >= 0 && w < g.width;
    col[idx] = inside ? x[((s * g.channels + c) * g.height + h) * g.width + w] : 0.0f;
  }
}

// One thread per dx element gathers the col entries that came from it. The CPU scatters over
// (ki, kj) in order, one window position each, so gathering in that order from 0 adds the same
// terms in the same sequence.
__global__ void col2im_kernel(const float* col, Geom g, std::int64_t n, float* dx) {
  const std::int64_t ohw = g.out_h * g.out_w;
  const std::int64_t hw = g.height * g.width;
  const std::int64_t total = n * g.channels * hw;
  TANDEM_GRID_STRIDE(idx, total) {
    const std::int64_t plane = idx / hw;
    const std::int64_t s = plane / g.channels;
    const std::int64_t c = plane % g.channels;
    const std::int64_t h = (idx % hw) / g.width;
    const std::int64_t w = idx % g.width;
    float sum = 0.0f;
    for (std::int64_t ki = 0; ki < g.kernel_h; ++ki) {
      const std::int64_t hi = h + g.pad_h - ki;  // = i * stride
      if (hi < 0 || hi % g.stride != 0 || hi / g.stride >= g.out_h) continue;
      const std::int64_t i = hi / g.stride;
      for (std::int64_t kj = 0; kj < g.kernel_w; ++kj) {
        const std::int64_t wj = w + g.pad_w - kj;
        if (wj < 0 || wj % g.stride != 0 || wj / g.stride >= g.out_w) continue;
        const std::int64_t r = (c * g.kernel_h + ki) * g.kernel_w + kj;
        sum += col[r * n * ohw + s * ohw + i * g.out_w + wj / g.stride];
      }
    }
    dx[idx] = sum;
  }
}

// to_cm: out[(ch * n + s) * hw + e] = x[(s * c + ch) * hw + e]; otherwise the inverse.
__global__ void permute_kernel(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                               bool to_cm, float* out) {
  const std::int64_t total = n * c * hw;
  TANDEM_GRID_STRIDE(idx, total) {
    const std::int64_t e = idx % hw;
    const std::int64_t outer = idx / hw;  // the destination's plane
    std::int64_t src_plane = 0;
    if (to_cm) {
      const std::int64_t ch = outer / n;
      const std::int64_t s = outer % n;
      src_plane = s * c + ch;
    } else {
      const std::int64_t s = outer / c;
      const std::int64_t ch = outer % c;
      src_plane = ch * n + s;
    }
    out[idx] = x[src_plane * hw + e];
  }
}

__global__ void max_pool_forward_kernel(const float* x, Geom g, std::int64_t n, float* y,
                                        std::int32_t* argmax) {
  const std::int64_t ohw = g.out_h * g.out_w;
  const std::int64_t total = n * g.channels * ohw;
  TANDEM_GRID_STRIDE(idx, total) {
    const float* plane = x + (idx / ohw) * g.height * g.width;
    const std::int64_t i = (idx % ohw) / g.out_w;
    const std::int64_t j = idx % g.out_w;
    // As the CPU: start at the window's first element inside the plane and take a later element
    // only when strictly greater (first maximum on ties; a NaN corner stays). Padding never wins.
    const std::int64_t h0 = max(i * g.stride - g.pad_h, std::int64_t{0});
    const std::int64_t h1 = min(i * g.stride - g.pad_h + g.kernel_h, g.height);
    const std::int64_t w0 = max(j * g.stride - g.pad_w, std::int64_t{0});
    const std::int64_t w1 = min(j * g.stride - g.pad_w + g.kernel_w, g.width);
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
    y[idx] = value;
    argmax[idx] = static_cast<std::int32_t>(best);
  }
}

// One thread per dx element gathers the outputs whose window covers it and chose it, in
// increasing output order: the order in which the CPU adds them.
__global__ void max_pool_backward_kernel(const float* dy, const std::int32_t* argmax, Geom g,
                                         std::int64_t n, float* dx) {
  const std::int64_t ohw = g.out_h * g.out_w;
  const std::int64_t hw = g.height * g.width;
  const std::int64_t total = n * g.channels * hw;
  TANDEM_GRID_STRIDE(idx, total) {
    const std::int64_t p = idx / hw;
    const std::int64_t at = idx % hw;
    const std::int64_t h = at / g.width;
    const std::int64_t w = at % g.width;
    // Windows i with i * stride <= h + pad_h < i * stride + kernel_h, likewise j.
    const std::int64_t hp = h + g.pad_h;
    const std::int64_t wp = w + g.pad_w;
    const std::int64_t i0 = hp >= g.kernel_h ? (hp - g.kernel_h) / g.stride + 1 : 0;
    const std::int64_t i1 = min(hp / g.stride, g.out_h - 1);
    const std::int64_t j0 = wp >= g.kernel_w ? (wp - g.kernel_w) / g.stride + 1 : 0;
    const std::int64_t j1 = min(wp / g.stride, g.out_w - 1);
    const float* gp = dy + p * ohw;
    const std::int32_t* ap = argmax + p * ohw;
    float sum = 0.0f;
    for (std::int64_t i = i0; i <= i1; ++i) {
      for (std::int64_t j = j0; j <= j1; ++j) {
        const std::int64_t o = i * g.out_w + j;
        if (ap[o] == at) sum += gp[o];
      }
    }
    dx[idx] = sum;
  }
}

#undef TANDEM_GRID_STRIDE

}  // namespace

void im2col(const float* x, const ConvGeometry& g, std::int64_t n, float* col, void* stream) {
  const std::int64_t total = g.col_rows() * n * g.out_hw();
  if (total <= 0) return;
  im2col_kernel<<<detail::grid_for(total), detail::kBlock, 0, detail::as_stream(stream)>>>(
      x, geom(g), n, col);
  detail::check_launch("im2col");
}

void col2im(const float* col, const ConvGeometry& g, std::int64_t n, float* dx, void* stream) {
  const std::int64_t total = n * g.sample_size();
  if (total <= 0) return;
  col2im_kernel<<<detail::grid_for(total), detail::kBlock, 0, detail::as_stream(stream)>>>(
      col, geom(g), n, dx);
  detail::check_launch("col2im");
}

void nchw_to_cm(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw, float* out,
                void* stream) {
  if (n * c * hw <= 0) return;
  permute_kernel<<<detail::grid_for(n * c * hw), detail::kBlock, 0, detail::as_stream(stream)>>>(
      x, n, c, hw, true, out);
  detail::check_launch("nchw_to_cm");
}

void cm_to_nchw(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw, float* out,
                void* stream) {
  if (n * c * hw <= 0) return;
  permute_kernel<<<detail::grid_for(n * c * hw), detail::kBlock, 0, detail::as_stream(stream)>>>(
      x, n, c, hw, false, out);
  detail::check_launch("cm_to_nchw");
}

void max_pool_forward(const float* x, const ConvGeometry& g, std::int64_t n, float* y,
                      std::int32_t* argmax, void* stream) {
  const std::int64_t total = n * g.channels * g.out_hw();
  if (total <= 0) return;
  max_pool_forward_kernel<<<detail::grid_for(total), detail::kBlock, 0,
                            detail::as_stream(stream)>>>(x, geom(g), n, y, argmax);
  detail::check_launch("max_pool_forward");
}

void max_pool_backward(const float* dy, const std::int32_t* argmax, const ConvGeometry& g,
                       std::int64_t n, float* dx, void* stream) {
  const std::int64_t total = n * g.sample_size();
  if (total <= 0) return;
  max_pool_backward_kernel<<<detail::grid_for(total), detail::kBlock, 0,
                             detail::as_stream(stream)>>>(dy, argmax, geom(g), n, dx);
  detail::check_launch("max_pool_backward");
}

}  // namespace tandem::models::cuda
