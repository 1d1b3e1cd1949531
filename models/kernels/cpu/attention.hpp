#pragma once

#include <cstdint>

namespace tandem::models::cpu {

// Causal multi-head attention core. qkv is [batch, seq, 3 * d_model] with each row laid out as
// [q | k | v] and head h in columns [h * d_head, (h + 1) * d_head) of each part. out is
// [batch, seq, d_model] (heads concatenated). probs [batch, heads, seq, seq] keeps the softmax
// (zero above the diagonal) for backward. Scores are scaled by 1 / sqrt(d_head).
void causal_attention_forward(const float* qkv, float* out, float* probs, std::int64_t batch,
                              std::int64_t seq, std::int64_t heads, std::int64_t d_head);

// dqkv (same layout as qkv, fully written) from dout and what forward kept.
void causal_attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                               std::int64_t batch, std::int64_t seq, std::int64_t heads,
                               std::int64_t d_head);

}  // namespace tandem::models::cpu
