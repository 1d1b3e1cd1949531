#pragma once

#include <cstddef>
#include <cstdint>

// Fused causal attention for bf16 GEMM precision: the same layouts as attention.hpp (qkv
// [batch, seq, 3 * d_model], heads d_head apart in each of q, k and v; out [batch, seq,
// d_model]), but the [seq, seq] probabilities never reach memory. Forward walks key tiles per
// query tile with an online softmax and keeps each row's log-sum-exp [batch, heads, seq];
// backward recomputes the probabilities tile by tile from it (FlashAttention-2's scheme).
// Products run on the tensor cores with bf16 operands rounded from the f32 tensors in shared
// memory, accumulated in f32. Pointers are device memory; `stream` is a cudaStream_t. Failures
// throw std::runtime_error.
namespace tandem::models::cuda {

// Whether the kernels exist for this head size (64 today: the GPT zoo's d_model / heads).
bool flash_attention_supported(std::int64_t d_head);

// out (fully written) and lse[b, h, i] = log sum_j<=i exp(scale * q_i . k_j).
void flash_attention_forward(const float* qkv, float* out, float* lse, std::int64_t batch,
                             std::int64_t seq, std::int64_t heads, std::int64_t d_head,
                             void* stream);

// Device bytes of backward's scratch: rowsum(dout * out) per row, [batch, heads, seq] floats.
std::size_t flash_attention_scratch_bytes(std::int64_t batch, std::int64_t seq, std::int64_t heads);

// dqkv (fully written) from forward's out and lse and the output gradient dout. scratch:
// flash_attention_scratch_bytes of device memory, overwritten.
void flash_attention_backward(const float* qkv, const float* out, const float* lse,
                              const float* dout, float* dqkv, std::int64_t batch, std::int64_t seq,
                              std::int64_t heads, std::int64_t d_head, void* scratch, void* stream);

}  // namespace tandem::models::cuda
