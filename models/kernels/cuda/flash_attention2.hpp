#pragma once

#include <cstddef>
#include <cstdint>

// Fused causal attention in FlashAttention-2's layout (flash_attention2.cu): tensor-core
// products through mma.sync with their fragments kept in registers, so the online softmax never
// leaves them. Same layouts as flash_attention.hpp: qkv [batch, seq, 3 * d_model] with heads
// d_head apart in each of q, k and v; out [batch, seq, d_model]; lse [batch, heads, seq] (natural
// log-sum-exp of each row's scaled scores). Head size 64 only.
//
// Two interfaces. The bf16 one takes and gives bf16 tensors, passed as their bit patterns
// (cuda_bf16.h's __nv_bfloat16, 16-byte aligned) so this header needs no CUDA include. The f32 one
// matches flash_attention.hpp's, plus caller-provided scratch: it rounds its inputs to bf16 there
// with a conversion kernel, runs the bf16 kernels, and widens the results. Pointers are device
// memory; `stream` is a cudaStream_t. Failures throw: std::invalid_argument for a shape or
// pointer the kernels do not take, std::runtime_error for the device.
namespace tandem::models::cuda {

using Bf16Bits = std::uint16_t;

// Whether the kernels exist for this head size (64).
bool flash_attention2_supported(std::int64_t d_head);

// bf16 interface. out fully written; lse[b, h, i] = log sum_j<=i exp(q_i . k_j / sqrt(d_head)).
void flash_attention2_forward_bf16(const Bf16Bits* qkv, Bf16Bits* out, float* lse,
                                   std::int64_t batch, std::int64_t seq, std::int64_t heads,
                                   std::int64_t d_head, void* stream);

// Device bytes of the bf16 backward's scratch: rowsum(dout * out) per row and the f32 dQ that
// the key tiles add into.
std::size_t flash_attention2_backward_bf16_scratch_bytes(std::int64_t batch, std::int64_t seq,
                                                         std::int64_t heads);

// dqkv (bf16, fully written) from forward's out and lse and the output gradient dout.
void flash_attention2_backward_bf16(const Bf16Bits* qkv, const Bf16Bits* out, const float* lse,
                                    const Bf16Bits* dout, Bf16Bits* dqkv, std::int64_t batch,
                                    std::int64_t seq, std::int64_t heads, std::int64_t d_head,
                                    void* scratch, void* stream);

// f32 interface: the bf16 copies of qkv and out.
std::size_t flash_attention2_forward_scratch_bytes(std::int64_t batch, std::int64_t seq,
                                                   std::int64_t heads);

void flash_attention2_forward(const float* qkv, float* out, float* lse, std::int64_t batch,
                              std::int64_t seq, std::int64_t heads, std::int64_t d_head,
                              void* scratch, void* stream);

// The bf16 copies of qkv, out and dout, and the bf16 backward's scratch.
std::size_t flash_attention2_backward_scratch_bytes(std::int64_t batch, std::int64_t seq,
                                                    std::int64_t heads);

// dqkv (f32, fully written).
void flash_attention2_backward(const float* qkv, const float* out, const float* lse,
                               const float* dout, float* dqkv, std::int64_t batch, std::int64_t seq,
                               std::int64_t heads, std::int64_t d_head, void* scratch,
                               void* stream);

}  // namespace tandem::models::cuda
