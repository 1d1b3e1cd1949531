#pragma once

#include <cstdint>

namespace tandem::models::cpu {

// Geometry of a 2-D convolution or pooling window over one NCHW sample. The window may be
// rectangular (Inception's 1x7 and 7x1 convolutions), with its own padding per dimension; the
// stride is the same in both.
struct ConvGeometry {
  std::int64_t channels = 0;
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::int64_t kernel_h = 1;
  std::int64_t kernel_w = 1;
  std::int64_t stride = 1;
  std::int64_t pad_h = 0;
  std::int64_t pad_w = 0;

  ConvGeometry() = default;
  // A square window.
  ConvGeometry(std::int64_t channels_, std::int64_t height_, std::int64_t width_,
               std::int64_t kernel, std::int64_t stride_, std::int64_t pad)
      : ConvGeometry(channels_, height_, width_, kernel, kernel, stride_, pad, pad) {}
  ConvGeometry(std::int64_t channels_, std::int64_t height_, std::int64_t width_,
               std::int64_t kernel_h_, std::int64_t kernel_w_, std::int64_t stride_,
               std::int64_t pad_h_, std::int64_t pad_w_)
      : channels(channels_),
        height(height_),
        width(width_),
        kernel_h(kernel_h_),
        kernel_w(kernel_w_),
        stride(stride_),
        pad_h(pad_h_),
        pad_w(pad_w_) {}

  std::int64_t out_h() const { return (height + 2 * pad_h - kernel_h) / stride + 1; }
  std::int64_t out_w() const { return (width + 2 * pad_w - kernel_w) / stride + 1; }
  std::int64_t out_hw() const { return out_h() * out_w(); }
  std::int64_t col_rows() const { return channels * kernel_h * kernel_w; }
  std::int64_t sample_size() const { return channels * height * width; }
};

// col[(c, ki, kj), s * out_hw + (oh * out_w + ow)] = x[s, c, oh*stride - pad_h + ki,
// ow*stride - pad_w + kj] (0 in the padding) for the n samples starting at x.
void im2col(const float* x, const ConvGeometry& g, std::int64_t n, float* col);
// The adjoint: dx (n samples, overwritten) = sum of col's entries over the windows.
void col2im(const float* col, const ConvGeometry& g, std::int64_t n, float* dx);

// Between NCHW [n, c, hw] and channel-major [c, n * hw] (the GEMM's layout).
void nchw_to_cm(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw, float* out);
void cm_to_nchw(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw, float* out);

// Max pooling; padding never wins (PyTorch's -inf padding), so pad_h, pad_w <= half the window
// keeps every window non-empty. Keeps the argmax (offset within its input plane, first maximum
// on ties, scanning from the window's first element inside the plane) of every output for
// backward.
void max_pool_forward(const float* x, const ConvGeometry& g, std::int64_t n, float* y,
                      std::int32_t* argmax);
void max_pool_backward(const float* dy, const std::int32_t* argmax, const ConvGeometry& g,
                       std::int64_t n, float* dx);

}  // namespace tandem::models::cpu
