#pragma once

#include <cstdint>

namespace tandem::models::cpu {

enum class Activation : std::uint8_t { none, relu, gelu, sigmoid, tanh };

const char* activation_name(Activation act);

// Whether act's backward reads the activation's output (relu, sigmoid, tanh) rather than its
// input (gelu); none reads neither.
constexpr bool backward_reads_output(Activation act) {
  return act == Activation::relu || act == Activation::sigmoid || act == Activation::tanh;
}

// In place on a row-major [rows, cols] matrix: z = y + bias[c] (bias may be null), y = act(z).
// For gelu, z is kept in pre[] (backward needs it); pre may be null otherwise.
void bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                      Activation act, float* pre);

// y = act(x) element-wise (pre-activation not kept).
void act_forward(const float* x, float* y, std::int64_t n, Activation act);

// dz = dy * act'(.) where `saved` is the activation's output (relu, sigmoid, tanh; see
// backward_reads_output) or input (gelu); dz may alias dy. For none, copies dy unless they
// alias.
void act_backward(const float* dy, const float* saved, float* dz, std::int64_t n, Activation act);

// act_backward over [rows, cols] fused with the bias gradient:
// db = alpha * sum_r dz[r, :] + beta * db (db null: no bias gradient).
void act_backward_bias(const float* dy, const float* saved, float* dz, std::int64_t rows,
                       std::int64_t cols, Activation act, float* db, float alpha, float beta);

}  // namespace tandem::models::cpu
