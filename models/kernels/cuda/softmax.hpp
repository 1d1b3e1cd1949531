#pragma once

#include <cstdint>

// Row softmax on the GPU: the softmax parts of models/kernels/cpu/attention.cpp (which keeps
// them private), generalised to any row length. Pointers are device memory; `stream` is a
// cudaStream_t from Stream::native_handle(). Launch failures throw std::runtime_error.
namespace tandem::models::cuda {

// y[r, :] = softmax(x[r, :]) over a row-major [rows, cols] matrix, computed as exp(x - max) /
// sum in f32 so no row overflows. causal: the rows are stacked [cols, cols] score matrices and
// row r covers columns [0, r % cols] only, with zeros above the diagonal (attention's mask).
// y may alias x.
void softmax_forward(const float* x, float* y, std::int64_t rows, std::int64_t cols, bool causal,
                     void* stream);

// dx = y * (dy - sum_c y * dy) per row (zero above the diagonal when causal); dx may alias dy.
void softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows,
                      std::int64_t cols, bool causal, void* stream);

}  // namespace tandem::models::cuda
