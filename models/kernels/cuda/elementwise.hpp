#pragma once

#include <cstdint>

#include "models/kernels/cpu/activation.hpp"

// The small element-wise and per-row ops that layers ran as inline loops on the CPU (a
// convolution's per-channel bias, the residual add, scaling a gradient sink, token ids to f32)
// and the element-wise maths of the public Kernels (multiply, exp, log, fill),
// for the CUDA Kernels (models/kernels/cuda/cuda_kernels.hpp). Pointers are device memory;
// `stream` is a cudaStream_t. Launch failures throw std::runtime_error naming the kernel.
namespace tandem::models::cuda {

// x[i] = beta * x[i]; beta = 0 writes zeros without reading x.
void scale(float* x, std::int64_t n, float beta, void* stream);

// dst[i] = a[i] + b[i]; dst may alias a or b.
void add(const float* a, const float* b, float* dst, std::int64_t n, void* stream);

// out[i] = alpha * a[i] * b[i] + beta * out[i]; beta = 0 never reads out; out may alias a or b.
void multiply(const float* a, const float* b, float alpha, float beta, float* out, std::int64_t n,
              void* stream);

// y[i] = e^x[i] and y[i] = ln x[i] (CUDA's expf and logf); y may alias x.
void exp(const float* x, float* y, std::int64_t n, void* stream);
void log(const float* x, float* y, std::int64_t n, void* stream);

// x[i] = value.
void fill(float* x, std::int64_t n, float value, void* stream);

// In place on row-major [rows, cols]: y[r, :] = act(y[r, :] + bias[r]); act none or relu.
void row_bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                          cpu::Activation act, void* stream);

// out[r] = alpha * sum_c x[r, c] + beta * out[r]; beta = 0 never reads out.
void row_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
             float* out, void* stream);

// y[i] = float(x[i]).
void i32_to_f32(const std::int32_t* x, float* y, std::int64_t n, void* stream);

// y[i] = int32(x[i]), rounding toward zero.
void f32_to_i32(const float* x, std::int32_t* y, std::int64_t n, void* stream);

}  // namespace tandem::models::cuda
