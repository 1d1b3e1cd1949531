#pragma once

#include <cstddef>
#include <cstdint>

#include "models/kernels/cuda/gemm.hpp"

// CUDA twin of models/kernels/cpu/attention.hpp: the same layouts and arguments, then what the
// GPU needs besides (scratch, GEMM precision) and the stream (a cudaStream_t from
// Stream::native_handle()). Pointers are device memory. Failures throw std::runtime_error.
//
// Built from strided-batched cuBLAS GEMMs (one call per sample covers all its heads, whose
// q/k/v are d_head apart in each row) and the causal row softmax of softmax.hpp. The full
// [seq, seq] score matrices are computed and masked, as on the CPU.
namespace tandem::models::cuda {

// Causal multi-head attention core. qkv is [batch, seq, 3 * d_model] with each row laid out as
// [q | k | v] and head h in columns [h * d_head, (h + 1) * d_head) of each part. out is
// [batch, seq, d_model] (heads concatenated). probs [batch, heads, seq, seq] keeps the softmax
// (zero above the diagonal) for backward. Scores are scaled by 1 / sqrt(d_head).
void causal_attention_forward(const float* qkv, float* out, float* probs, std::int64_t batch,
                              std::int64_t seq, std::int64_t heads, std::int64_t d_head,
                              GemmPrecision precision, void* stream);

// Device bytes of the scratch causal_attention_backward needs: one sample's [heads, seq, seq]
// probability gradients (samples run one after another on the stream and reuse it).
std::size_t causal_attention_scratch_bytes(std::int64_t seq, std::int64_t heads);

// dqkv (same layout as qkv, fully written) from dout and what forward kept. scratch:
// causal_attention_scratch_bytes(seq, heads) of device memory, overwritten.
void causal_attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                               std::int64_t batch, std::int64_t seq, std::int64_t heads,
                               std::int64_t d_head, void* scratch, GemmPrecision precision,
                               void* stream);

}  // namespace tandem::models::cuda
