#pragma once

#include <cstdint>

#include "models/kernels/cpu/activation.hpp"

// CUDA twins of models/kernels/cpu/activation.hpp: the same arguments in the same order, then
// the stream (a cudaStream_t from Stream::native_handle()). Pointers are device memory; kernels
// launch on the current device. Launch failures throw std::runtime_error naming the kernel.
namespace tandem::models::cuda {

using cpu::Activation;

// In place on [rows, cols]: z = y + bias[c] (bias may be null), y = act(z); gelu keeps z in pre.
// With Activation::none this is the bias add (row broadcast).
void bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                      Activation act, float* pre, void* stream);

// y = act(x) element-wise; gelu is the tanh form of the CPU kernels.
void act_forward(const float* x, float* y, std::int64_t n, Activation act, void* stream);

// dz = dy * act'(.) where `saved` is the activation's output (relu, sigmoid, tanh) or input
// (gelu); dz may alias dy.
void act_backward(const float* dy, const float* saved, float* dz, std::int64_t n, Activation act,
                  void* stream);

// act_backward over [rows, cols], then the bias gradient db = alpha * sum_r dz[r, :] + beta * db
// (db null: none; beta = 0 never reads db).
void act_backward_bias(const float* dy, const float* saved, float* dz, std::int64_t rows,
                       std::int64_t cols, Activation act, float* db, float alpha, float beta,
                       void* stream);

}  // namespace tandem::models::cuda
