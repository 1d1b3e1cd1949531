#pragma once

#include <cstdint>

#include "models/kernels/kernels.hpp"

namespace tandem::models::detail {

// The arithmetic of a fully connected layer on row-major 2-D data, shared by Linear and the
// layers built from linear maps (attention, transformer block). Weight is [out, in]. Pointers
// are into memory of k's device.

// y = act(x W^T + b); pre receives x W^T + b when act needs it (gelu).
void linear_forward(const Kernels& k, const float* x, std::int64_t rows, std::int64_t in,
                    const float* w, const float* b, std::int64_t out, Activation act, float* y,
                    float* pre);
// dx = dz W.
void linear_backward_input(const Kernels& k, const float* dz, std::int64_t rows, std::int64_t in,
                           const float* w, std::int64_t out, float* dx);
// dW = alpha * dz^T x + beta * dW.
void linear_backward_weight(const Kernels& k, const float* dz, const float* x, std::int64_t rows,
                            std::int64_t in, std::int64_t out, float alpha, float beta, float* dw);

// The same at bf16 precision (k.bf16_products()): w16 is the weight's bf16 copy
// (Kernels::bf16_copy), x16 the input and dz16 the pre-activation gradient rounded to bf16
// once by the caller; products accumulate in f32 and every output stays f32.
void linear_forward_bf16(const Kernels& k, const BFloat16* x16, std::int64_t rows, std::int64_t in,
                         const BFloat16* w16, const float* b, std::int64_t out, Activation act,
                         float* y, float* pre);
void linear_backward_input_bf16(const Kernels& k, const BFloat16* dz16, std::int64_t rows,
                                std::int64_t in, const BFloat16* w16, std::int64_t out, float* dx);
void linear_backward_weight_bf16(const Kernels& k, const BFloat16* dz16, const BFloat16* x16,
                                 std::int64_t rows, std::int64_t in, std::int64_t out, float alpha,
                                 float beta, float* dw);

// A layer's linear map (weight tensor `w`, [out, in]) at the precision its kernels ask for: the
// f32 functions above, or at bf16 products (Kernels::bf16_products) x and dz rounded on the way
// in, w through its cached bf16 copy (the layers that keep no rounded copies of their own:
// the transformer block). _weight rounds x to a bf16 temporary and, since `dw` may be the weight
// itself (a fused update), drops the weight's cached copy once written.
void linear_map_forward(const Kernels& k, const float* x, std::int64_t rows, std::int64_t in,
                        const Tensor& w, const float* b, std::int64_t out, Activation act, float* y,
                        float* pre);
void linear_map_backward_input(const Kernels& k, const float* dz, std::int64_t rows,
                               std::int64_t in, const Tensor& w, std::int64_t out, float* dx);
void linear_map_backward_weight(const Kernels& k, const float* dz, const float* x,
                                std::int64_t rows, std::int64_t in, std::int64_t out, float alpha,
                                float beta, Tensor& dw);

}  // namespace tandem::models::detail
