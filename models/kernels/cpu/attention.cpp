#include "models/kernels/cpu/attention.hpp"

#include <cmath>
#include <vector>

#include "models/kernels/cpu/gemm.hpp"
#include "models/kernels/cpu/math.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/cpu/vectorize.hpp"

// One task per (sample, head): four small single-threaded GEMMs and a masked softmax. (Loops
// over the causal triangle only were tried: half the FLOPs, yet slower than these BLAS calls.)
namespace tandem::models::cpu {
namespace {

// Row r of the [seq, seq] scores: softmax over columns [0, r], zero above the diagonal.
TANDEM_VECTOR_CLONES
void causal_softmax_rows(float* p, std::int64_t seq) {
  for (std::int64_t r = 0; r < seq; ++r) {
    float* row = p + r * seq;
    const float mx = lane_max(row, r + 1);
    for (std::int64_t c = 0; c <= r; ++c) row[c] = fast_exp(row[c] - mx);
    const float inv = 1.0f / lane_sum(row, r + 1);
    for (std::int64_t c = 0; c <= r; ++c) row[c] *= inv;
    for (std::int64_t c = r + 1; c < seq; ++c) row[c] = 0.0f;
  }
}

// dS = P * (dP - rowsum(P * dP)) on and below the diagonal, 0 above (in place on dp).
TANDEM_VECTOR_CLONES
void causal_softmax_backward_rows(const float* p, float* dp, std::int64_t seq) {
  for (std::int64_t r = 0; r < seq; ++r) {
    const float* pr = p + r * seq;
    float* dr = dp + r * seq;
    const float dot = lane_dot(pr, dr, r + 1);
    for (std::int64_t c = 0; c <= r; ++c) dr[c] = pr[c] * (dr[c] - dot);
    for (std::int64_t c = r + 1; c < seq; ++c) dr[c] = 0.0f;
  }
}

}  // namespace

void causal_attention_forward(const float* qkv, float* out, float* probs, std::int64_t batch,
                              std::int64_t seq, std::int64_t heads, std::int64_t d_head) {
  const std::int64_t d_model = heads * d_head;
  const std::int64_t ld = 3 * d_model;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  parallel_for(batch * heads, 1, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t b = i / heads;
      const std::int64_t h = i % heads;
      const float* q = qkv + b * seq * ld + h * d_head;
      const float* k = q + d_model;
      const float* v = q + 2 * d_model;
      float* p = probs + i * seq * seq;
      gemm_serial(false, true, seq, seq, d_head, scale, q, ld, k, ld, 0.0f, p, seq);
      causal_softmax_rows(p, seq);
      gemm_serial(false, false, seq, d_head, seq, 1.0f, p, seq, v, ld, 0.0f,
                  out + b * seq * d_model + h * d_head, d_model);
    }
  });
}

void causal_attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                               std::int64_t batch, std::int64_t seq, std::int64_t heads,
                               std::int64_t d_head) {
  const std::int64_t d_model = heads * d_head;
  const std::int64_t ld = 3 * d_model;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  parallel_for(batch * heads, 1, [&](std::int64_t i0, std::int64_t i1) {
    std::vector<float> dp(static_cast<std::size_t>(seq * seq));
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t b = i / heads;
      const std::int64_t h = i % heads;
      const std::int64_t base = b * seq * ld + h * d_head;
      const float* q = qkv + base;
      const float* k = q + d_model;
      const float* v = q + 2 * d_model;
      float* dq = dqkv + base;
      float* dk = dq + d_model;
      float* dv = dq + 2 * d_model;
      const float* p = probs + i * seq * seq;
      const float* d_o = dout + b * seq * d_model + h * d_head;
      // dP = dO v^T; dv = P^T dO.
      gemm_serial(false, true, seq, seq, d_head, 1.0f, d_o, d_model, v, ld, 0.0f, dp.data(), seq);
      gemm_serial(true, false, seq, d_head, seq, 1.0f, p, seq, d_o, d_model, 0.0f, dv, ld);
      causal_softmax_backward_rows(p, dp.data(), seq);
      // S = scale * q k^T: dq = scale * dS k, dk = scale * dS^T q.
      gemm_serial(false, false, seq, d_head, seq, scale, dp.data(), seq, k, ld, 0.0f, dq, ld);
      gemm_serial(true, false, seq, d_head, seq, scale, dp.data(), seq, q, ld, 0.0f, dk, ld);
    }
  });
}

}  // namespace tandem::models::cpu
