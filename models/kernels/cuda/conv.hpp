#pragma once

#include <cstdint>

#include "models/kernels/cpu/conv.hpp"

// CUDA twins of models/kernels/cpu/conv.hpp: the same arguments in the same order, then the
// stream (a cudaStream_t from Stream::native_handle()). Pointers are device memory. Launch
// failures throw std::runtime_error naming the kernel. A convolution is these plus gemm.hpp,
// as on the CPU (layers/conv2d.cpp): im2col, GEMM with the weights, cm_to_nchw.
//
// Every output element is written by one thread that sums its terms in the CPU kernel's
// order, so all of these repeat the CPU's results bit for bit (no atomics).
namespace tandem::models::cuda {

using cpu::ConvGeometry;

// col[(c, ki, kj), s * out_hw + (oh * out_w + ow)] = x[s, c, oh*stride - pad + ki, ...] (0 in the
// padding) for the n samples starting at x.
void im2col(const float* x, const ConvGeometry& g, std::int64_t n, float* col, void* stream);
// The adjoint: dx (n samples, overwritten) = sum of col's entries over the windows.
void col2im(const float* col, const ConvGeometry& g, std::int64_t n, float* dx, void* stream);

// Between NCHW [n, c, hw] and channel-major [c, n * hw] (the GEMM's layout).
void nchw_to_cm(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw, float* out,
                void* stream);
void cm_to_nchw(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw, float* out,
                void* stream);

// Max pooling (no padding). Keeps the argmax (offset within its input plane, first maximum on
// ties) of every output for backward.
void max_pool_forward(const float* x, const ConvGeometry& g, std::int64_t n, float* y,
                      std::int32_t* argmax, void* stream);
// dx (overwritten) from dy and the argmax; overlapping windows (stride < kernel) add in the
// CPU's order.
void max_pool_backward(const float* dy, const std::int32_t* argmax, const ConvGeometry& g,
                       std::int64_t n, float* dx, void* stream);

}  // namespace tandem::models::cuda
