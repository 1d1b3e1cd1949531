#pragma once

#include <cstdint>

#include "models/kernels/cpu/activation.hpp"
#include "models/kernels/cuda/gemm.hpp"
#include "runtime/dtype.hpp"

// A linear layer's three GEMMs through cuBLASLt, with the element-wise work that follows each
// product fused into the GEMM's epilogue, so the product's output is written once instead of
// being written, read back and rewritten by bias_act_forward / act_backward_bias
// (activation.hpp). The operands are packed row-major, as the layers hold them: x [rows, in],
// W [out, in], y and pre [rows, out], dy [rows, out], dz and dx [rows, in], dW [out, in].
//
// Two flavours of each call:
//  - float operands at GemmPrecision f32 (CUBLAS_COMPUTE_32F) or tf32
//    (CUBLAS_COMPUTE_32F_FAST_TF32); bias, pre and gradients are f32;
//  - BFloat16 operands (bf16 precision): bf16 in, f32 accumulation, bf16 out, and the bias and
//    the saved pre-activation in bf16 as cuBLASLt keeps them in the output's type. Nothing is
//    converted per call: callers that hold bf16 activations and weights pass them as they are.
//
// GELU is cuBLASLt's tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the same
// function as the CPU kernels' gelu (models/kernels/cpu/math.hpp writes it as x * sigmoid(2u),
// an identity). ReLU forward fuses without an auxiliary output: the layers keep relu's output
// for backward, and relu'(z) is y > 0. ReLU backward is not fused: cuBLASLt's DRELU epilogues
// read a bit-mask from RELU_AUX forwards that the layers do not keep.
//
// Every dimension must be >= 1. GELU's saved pre-activation (forward) and the one read back
// (backward) have as many columns as features, which cuBLASLt requires to be a multiple of 8
// (gelu_epilogue_supported). Arguments are checked before any CUDA call: a bad one throws
// std::invalid_argument. A cuBLASLt failure, or no algorithm for a shape, throws
// std::runtime_error naming the call, its dimensions and precision.
//
// Each (device, stream) has a cuBLASLt handle and a small cache of matmul descriptors, layouts
// and the heuristic's chosen algorithm per shape and operand alignment; the workspace is the
// stream's cuBLAS workspace (gemm.hpp), which is safe to share because work on one stream runs
// in order. Calls from several threads are safe. Pointers are device memory; `stream` is a
// cudaStream_t from Stream::native_handle().
namespace tandem::models::cuda {

using cpu::Activation;

struct LinearDims {
  std::int64_t rows;  // samples (batch x positions)
  std::int64_t in;    // input features
  std::int64_t out;   // output features
};

// Whether the GELU epilogues accept this many features (the columns of pre).
bool gelu_epilogue_supported(std::int64_t features);

// y = act(x W^T + b). b may be null (no bias). With gelu, pre (required) receives the
// pre-activation x W^T + b; otherwise pre is ignored and may be null. act none or relu fuse at
// any size; gelu needs gelu_epilogue_supported(out).
void linear_forward_epilogue(const float* x, const float* w, const float* b, float* y, float* pre,
                             LinearDims dims, Activation act, GemmPrecision precision,
                             void* stream);
void linear_forward_epilogue(const BFloat16* x, const BFloat16* w, const BFloat16* b, BFloat16* y,
                             BFloat16* pre, LinearDims dims, Activation act, void* stream);

// The input gradient of the layer after a GELU, with the GELU's backward and its bias gradient
// fused: dz = (dy W) * gelu'(pre), where dy [rows, out] is the next layer's output gradient, W
// [out, in] its weight and pre [rows, in] the GELU's saved input; db[c] = sum_r dz[r, c] is
// overwritten (db null: none). Needs gelu_epilogue_supported(in).
void linear_backward_input_dgelu(const float* dy, const float* w, const float* pre, float* dz,
                                 float* db, LinearDims dims, GemmPrecision precision, void* stream);
void linear_backward_input_dgelu(const BFloat16* dy, const BFloat16* w, const BFloat16* pre,
                                 BFloat16* dz, BFloat16* db, LinearDims dims, void* stream);

// The weight gradient with the bias gradient fused: dW = dz^T x + beta * dW (beta 0 never reads
// dW) and db[c] = sum_r dz[r, c], overwritten (db null: none). The bf16 flavour reads bf16 dz
// and x and writes f32 dW and db, so gradients accumulate in f32.
void linear_backward_weight_bgrad(const float* dz, const float* x, float* dw, float* db, float beta,
                                  LinearDims dims, GemmPrecision precision, void* stream);
void linear_backward_weight_bgrad(const BFloat16* dz, const BFloat16* x, float* dw, float* db,
                                  float beta, LinearDims dims, void* stream);

}  // namespace tandem::models::cuda
