#include <cmath>

#include "models/kernels/cuda/attention.hpp"
#include "models/kernels/cuda/softmax.hpp"

// No kernels of its own: GEMMs and the causal softmax, all enqueued on the caller's stream.
// Per sample, head h of q, k and v sits d_head columns after head h - 1 in rows 3 * d_model
// wide, so one strided-batched GEMM (stride d_head, leading dimension 3 * d_model) covers all
// heads of a sample. Samples are further apart (seq * 3 * d_model), which a single stride
// cannot also express, hence one call per sample.
namespace tandem::models::cuda {

void causal_attention_forward(const float* qkv, float* out, float* probs, std::int64_t batch,
                              std::int64_t seq, std::int64_t heads, std::int64_t d_head,
                              GemmPrecision precision, void* stream) {
  if (batch <= 0 || seq <= 0 || heads <= 0 || d_head <= 0) return;
  const std::int64_t d_model = heads * d_head;
  const std::int64_t ld = 3 * d_model;
  const std::int64_t square = seq * seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  for (std::int64_t b = 0; b < batch; ++b) {
    const float* q = qkv + b * seq * ld;
    // S = scale * q k^T for every head at once.
    gemm_strided_batched(false, true, seq, seq, d_head, scale, q, ld, d_head, q + d_model, ld,
                         d_head, 0.0f, probs + b * heads * square, seq, square, heads, precision,
                         stream);
  }
  // In place: every [seq, seq] block of probs is one set of seq rows of the causal softmax.
  softmax_forward(probs, probs, batch * heads * seq, seq, true, stream);
  for (std::int64_t b = 0; b < batch; ++b) {
    const float* v = qkv + b * seq * ld + 2 * d_model;
    gemm_strided_batched(false, false, seq, d_head, seq, 1.0f, probs + b * heads * square, seq,
                         square, v, ld, d_head, 0.0f, out + b * seq * d_model, d_model, d_head,
                         heads, precision, stream);
  }
}

std::size_t causal_attention_scratch_bytes(std::int64_t seq, std::int64_t heads) {
  return static_cast<std::size_t>(heads * seq * seq) * sizeof(float);
}

void causal_attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                               std::int64_t batch, std::int64_t seq, std::int64_t heads,
                               std::int64_t d_head, void* scratch, GemmPrecision precision,
                               void* stream) {
  if (batch <= 0 || seq <= 0 || heads <= 0 || d_head <= 0) return;
  const std::int64_t d_model = heads * d_head;
  const std::int64_t ld = 3 * d_model;
  const std::int64_t square = seq * seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  auto* ds = static_cast<float*>(scratch);
  for (std::int64_t b = 0; b < batch; ++b) {
    const float* q = qkv + b * seq * ld;
    const float* k = q + d_model;
    const float* v = q + 2 * d_model;
    float* dq = dqkv + b * seq * ld;
    float* dk = dq + d_model;
    float* dv = dq + 2 * d_model;
    const float* p = probs + b * heads * square;
    const float* d_o = dout + b * seq * d_model;
    // dP = dO v^T; dv = P^T dO.
    gemm_strided_batched(false, true, seq, seq, d_head, 1.0f, d_o, d_model, d_head, v, ld, d_head,
                         0.0f, ds, seq, square, heads, precision, stream);
    gemm_strided_batched(true, false, seq, d_head, seq, 1.0f, p, seq, square, d_o, d_model, d_head,
                         0.0f, dv, ld, d_head, heads, precision, stream);
    // dS = P * (dP - rowsum(P * dP)), zero above the diagonal; in place.
    softmax_backward(p, ds, ds, heads * seq, seq, true, stream);
    // S = scale * q k^T: dq = scale * dS k, dk = scale * dS^T q.
    gemm_strided_batched(false, false, seq, d_head, seq, scale, ds, seq, square, k, ld, d_head,
                         0.0f, dq, ld, d_head, heads, precision, stream);
    gemm_strided_batched(true, false, seq, d_head, seq, scale, ds, seq, square, q, ld, d_head, 0.0f,
                         dk, ld, d_head, heads, precision, stream);
  }
}

}  // namespace tandem::models::cuda
