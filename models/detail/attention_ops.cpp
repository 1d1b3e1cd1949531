#include "models/detail/attention_ops.hpp"

#include "models/detail/checks.hpp"

namespace tandem::models::detail {

Tensor causal_attention_forward(const Kernels& k, const float* qkv, float* out, std::int64_t b,
                                std::int64_t t, std::int64_t heads, std::int64_t d_head) {
  if (k.fused_attention(d_head)) {
    Tensor lse = k.empty({b, heads, t});
    k.fused_attention_forward(qkv, out, ptr(lse), b, t, heads, d_head);
    return lse;
  }
  Tensor probs = k.empty({b, heads, t, t});
  k.causal_attention_forward(qkv, out, ptr(probs), b, t, heads, d_head);
  return probs;
}

void causal_attention_backward(const Kernels& k, const float* qkv, const float* out,
                               const Tensor& kept, const float* dout, float* dqkv, std::int64_t b,
                               std::int64_t t, std::int64_t heads, std::int64_t d_head) {
  if (kept.shape().size() == 3) {
    k.fused_attention_backward(qkv, out, ptr(kept), dout, dqkv, b, t, heads, d_head);
  } else {
    k.causal_attention_backward(qkv, ptr(kept), dout, dqkv, b, t, heads, d_head);
  }
}

}  // namespace tandem::models::detail
