#pragma once

#include <cstdint>

#include "models/kernels/kernels.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models::detail {

// The causal attention core shared by CausalSelfAttention and TransformerBlock, whichever way
// the device runs it: fused where k.fused_attention(d_head) says so, materialised otherwise.
// Pointers are into memory of k's device; qkv is [b, t, 3 d], out [b, t, d].

// Writes out and returns what backward needs besides qkv and out: each row's log-sum-exp
// [b, heads, t] (fused) or the probabilities [b, heads, t, t].
Tensor causal_attention_forward(const Kernels& k, const float* qkv, float* out, std::int64_t b,
                                std::int64_t t, std::int64_t heads, std::int64_t d_head);

// dqkv from forward's qkv, out and kept tensor (its shape says which attention ran) and dout.
void causal_attention_backward(const Kernels& k, const float* qkv, const float* out,
                               const Tensor& kept, const float* dout, float* dqkv, std::int64_t b,
                               std::int64_t t, std::int64_t heads, std::int64_t d_head);

}  // namespace tandem::models::detail
