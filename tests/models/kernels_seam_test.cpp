// Layers compute only through their Context's Kernels (models/kernels/kernels.hpp), the seam
// that lets the same layer code run on another device. A recording decorator over the CPU
// kernels sees every call; a layer that called a cpu:: kernel directly, ran a loop of its own
// on tensor memory, or allocated with Tensor::empty would show up as a missing call, a pointer
// into memory the kernels never handed out, or an output the kernels did not allocate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "layer_cases.hpp"
#include "models/kernels/cpu/gemm.hpp"
#include "models/kernels/kernels.hpp"
#include "models/model.hpp"
#include "models/model_spec.hpp"
#include "models/optimizer.hpp"

namespace tandem::models::testing {
namespace {

// Forwards to `inner`, counting calls per method and checking that every pointer argument
// lies inside a tensor that came from empty() or to_f32(), or that the test handed in.
class RecordingKernels final : public Kernels {
 public:
  explicit RecordingKernels(const Kernels& inner) : inner_(inner) {}

  void hand_in(const Tensor& t) const { remember(t); }
  // Calls from now on count towards `phase` (and towards the totals).
  void begin_phase(const std::string& phase) const {
    std::lock_guard lock(mu_);
    phase_ = phase;
  }

  std::int64_t count(const std::string& method) const {
    std::lock_guard lock(mu_);
    std::int64_t n = 0;
    for (const auto& [phase, counts] : counts_) {
      const auto it = counts.find(method);
      n += it == counts.end() ? 0 : it->second;
    }
    return n;
  }
  std::map<std::string, std::int64_t> counts(const std::string& phase) const {
    std::lock_guard lock(mu_);
    const auto it = counts_.find(phase);
    return it == counts_.end() ? std::map<std::string, std::int64_t>{} : it->second;
  }
  std::int64_t compute_calls() const {
    std::lock_guard lock(mu_);
    std::int64_t n = 0;
    for (const auto& [phase, counts] : counts_) {
      for (const auto& [method, c] : counts) n += method == "empty" ? 0 : c;
    }
    return n;
  }
  std::vector<std::string> stray() const {
    std::lock_guard lock(mu_);
    return stray_;
  }
  // Whether t's memory came from this object (empty() / to_f32()) or from the test.
  bool knows(const Tensor& t) const {
    std::lock_guard lock(mu_);
    return t.numel() == 0 || inside(t.raw_data());
  }

  Device device() const override { return inner_.device(); }

  Tensor empty(const Shape& shape, DType dtype) const override {
    seen("empty");
    Tensor t = inner_.empty(shape, dtype);
    remember(t);
    return t;
  }
  Tensor to_f32(const Tensor& t) const override {
    seen("to_f32");
    Tensor r = inner_.to_f32(t);
    remember(r);
    return r;
  }
  void copy(const float* src, float* dst, std::int64_t n) const override {
    seen("copy", {src, dst});
    inner_.copy(src, dst, n);
  }
  void scale(float* x, std::int64_t n, float beta) const override {
    seen("scale", {x});
    inner_.scale(x, n, beta);
  }
  void add(const float* a, const float* b, float* dst, std::int64_t n) const override {
    seen("add", {a, b, dst});
    inner_.add(a, b, dst, n);
  }
  void copy_2d(const float* src, std::int64_t src_ld, float* dst, std::int64_t dst_ld,
               std::int64_t rows, std::int64_t cols) const override {
    seen("copy_2d", {src, dst});
    inner_.copy_2d(src, src_ld, dst, dst_ld, rows, cols);
  }
  void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
            const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
            float* c, std::int64_t ldc) const override {
    seen("gemm", {a, b, c});
    inner_.gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                        Activation act, float* pre) const override {
    seen("bias_act_forward", {y, bias, pre});
    inner_.bias_act_forward(y, bias, rows, cols, act, pre);
  }
  void act_forward(const float* x, float* y, std::int64_t n, Activation act) const override {
    seen("act_forward", {x, y});
    inner_.act_forward(x, y, n, act);
  }
  void act_backward(const float* dy, const float* saved, float* dz, std::int64_t n,
                    Activation act) const override {
    seen("act_backward", {dy, saved, dz});
    inner_.act_backward(dy, saved, dz, n, act);
  }
  void act_backward_bias(const float* dy, const float* saved, float* dz, std::int64_t rows,
                         std::int64_t cols, Activation act, float* db, float alpha,
                         float beta) const override {
    seen("act_backward_bias", {dy, saved, dz, db});
    inner_.act_backward_bias(dy, saved, dz, rows, cols, act, db, alpha, beta);
  }
  void column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
                  float* out) const override {
    seen("column_sum", {x, out});
    inner_.column_sum(x, rows, cols, alpha, beta, out);
  }
  void row_bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                            Activation act) const override {
    seen("row_bias_act_forward", {y, bias});
    inner_.row_bias_act_forward(y, bias, rows, cols, act);
  }
  void row_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
               float* out) const override {
    seen("row_sum", {x, out});
    inner_.row_sum(x, rows, cols, alpha, beta, out);
  }
  void multiply(const float* a, const float* b, float alpha, float beta, float* out,
                std::int64_t n) const override {
    seen("multiply", {a, b, out});
    inner_.multiply(a, b, alpha, beta, out, n);
  }
  void exp(const float* x, float* y, std::int64_t n) const override {
    seen("exp", {x, y});
    inner_.exp(x, y, n);
  }
  void log(const float* x, float* y, std::int64_t n) const override {
    seen("log", {x, y});
    inner_.log(x, y, n);
  }
  void fill(float* x, std::int64_t n, float value) const override {
    seen("fill", {x});
    inner_.fill(x, n, value);
  }
  void softmax_forward(const float* x, float* y, std::int64_t rows,
                       std::int64_t cols) const override {
    seen("softmax_forward", {x, y});
    inner_.softmax_forward(x, y, rows, cols);
  }
  void softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows,
                        std::int64_t cols) const override {
    seen("softmax_backward", {y, dy, dx});
    inner_.softmax_backward(y, dy, dx, rows, cols);
  }
  void row_max(const float* x, std::int64_t rows, std::int64_t cols, float* out) const override {
    seen("row_max", {x, out});
    inner_.row_max(x, rows, cols, out);
  }
  void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                          float* xhat, float* rstd, std::int64_t rows, std::int64_t cols,
                          float eps) const override {
    seen("layer_norm_forward", {x, gamma, beta, y, xhat, rstd});
    inner_.layer_norm_forward(x, gamma, beta, y, xhat, rstd, rows, cols, eps);
  }
  void layer_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                 const float* gamma, float* dx, std::int64_t rows,
                                 std::int64_t cols) const override {
    seen("layer_norm_backward_input", {dy, xhat, rstd, gamma, dx});
    inner_.layer_norm_backward_input(dy, xhat, rstd, gamma, dx, rows, cols);
  }
  void layer_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                  std::int64_t rows, std::int64_t cols, float alpha,
                                  float beta) const override {
    seen("layer_norm_backward_weight", {dy, xhat, dgamma, dbeta});
    inner_.layer_norm_backward_weight(dy, xhat, dgamma, dbeta, rows, cols, alpha, beta);
  }
  void batch_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                          float* xhat, float* rstd, float* sums, std::int64_t n, std::int64_t c,
                          std::int64_t hw, float eps) const override {
    seen("batch_norm_forward", {x, gamma, beta, y, xhat, rstd, sums});
    inner_.batch_norm_forward(x, gamma, beta, y, xhat, rstd, sums, n, c, hw, eps);
  }
  void batch_norm_inference(const float* x, const float* gamma, const float* beta,
                            const float* mean, const float* var, float* y, std::int64_t n,
                            std::int64_t c, std::int64_t hw, float eps) const override {
    seen("batch_norm_inference", {x, gamma, beta, mean, var, y});
    inner_.batch_norm_inference(x, gamma, beta, mean, var, y, n, c, hw, eps);
  }
  void batch_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                 const float* gamma, float* dx, std::int64_t n, std::int64_t c,
                                 std::int64_t hw) const override {
    seen("batch_norm_backward_input", {dy, xhat, rstd, gamma, dx});
    inner_.batch_norm_backward_input(dy, xhat, rstd, gamma, dx, n, c, hw);
  }
  void batch_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                  std::int64_t n, std::int64_t c, std::int64_t hw, float alpha,
                                  float beta) const override {
    seen("batch_norm_backward_weight", {dy, xhat, dgamma, dbeta});
    inner_.batch_norm_backward_weight(dy, xhat, dgamma, dbeta, n, c, hw, alpha, beta);
  }
  void batch_norm_update_running(const float* sum, const float* sum_sq, const float* count,
                                 const float* mean, const float* var, const float* updates,
                                 float* mean_out, float* var_out, float* updates_out,
                                 std::int64_t c, float momentum) const override {
    seen("batch_norm_update_running",
         {sum, sum_sq, count, mean, var, updates, mean_out, var_out, updates_out});
    inner_.batch_norm_update_running(sum, sum_sq, count, mean, var, updates, mean_out, var_out,
                                     updates_out, c, momentum);
  }
  void embedding_forward(const std::int32_t* ids, const float* table, const float* pos, float* y,
                         std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                         std::int64_t dim) const override {
    seen("embedding_forward", {ids, table, pos, y});
    inner_.embedding_forward(ids, table, pos, y, batch, seq, vocab, dim);
  }
  void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable, float* dpos,
                          std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                          std::int64_t dim, float alpha, float beta) const override {
    seen("embedding_backward", {ids, dy, dtable, dpos});
    inner_.embedding_backward(ids, dy, dtable, dpos, batch, seq, vocab, dim, alpha, beta);
  }
  void dropout_apply(const float* x, float* y, std::int64_t samples, std::int64_t per_sample,
                     float p, std::uint64_t key, std::int64_t first_sample) const override {
    seen("dropout_apply", {x, y});
    inner_.dropout_apply(x, y, samples, per_sample, p, key, first_sample);
  }
  void causal_attention_forward(const float* qkv, float* out, float* probs, std::int64_t batch,
                                std::int64_t seq, std::int64_t heads,
                                std::int64_t d_head) const override {
    seen("causal_attention_forward", {qkv, out, probs});
    inner_.causal_attention_forward(qkv, out, probs, batch, seq, heads, d_head);
  }
  void causal_attention_backward(const float* qkv, const float* probs, const float* dout,
                                 float* dqkv, std::int64_t batch, std::int64_t seq,
                                 std::int64_t heads, std::int64_t d_head) const override {
    seen("causal_attention_backward", {qkv, probs, dout, dqkv});
    inner_.causal_attention_backward(qkv, probs, dout, dqkv, batch, seq, heads, d_head);
  }
  void im2col(const float* x, const ConvGeometry& g, std::int64_t n, float* col) const override {
    seen("im2col", {x, col});
    inner_.im2col(x, g, n, col);
  }
  void col2im(const float* col, const ConvGeometry& g, std::int64_t n, float* dx) const override {
    seen("col2im", {col, dx});
    inner_.col2im(col, g, n, dx);
  }
  void nchw_to_cm(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                  float* out) const override {
    seen("nchw_to_cm", {x, out});
    inner_.nchw_to_cm(x, n, c, hw, out);
  }
  void cm_to_nchw(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                  float* out) const override {
    seen("cm_to_nchw", {x, out});
    inner_.cm_to_nchw(x, n, c, hw, out);
  }
  void max_pool_forward(const float* x, const ConvGeometry& g, std::int64_t n, float* y,
                        std::int32_t* argmax) const override {
    seen("max_pool_forward", {x, y, argmax});
    inner_.max_pool_forward(x, g, n, y, argmax);
  }
  void max_pool_backward(const float* dy, const std::int32_t* argmax, const ConvGeometry& g,
                         std::int64_t n, float* dx) const override {
    seen("max_pool_backward", {dy, argmax, dx});
    inner_.max_pool_backward(dy, argmax, g, n, dx);
  }
  void copy_bytes(const void* src, void* dst, std::size_t bytes) const override {
    seen("copy_bytes", {src, dst});
    inner_.copy_bytes(src, dst, bytes);
  }
  void f32_to_i32(const float* x, std::int32_t* y, std::int64_t n) const override {
    seen("f32_to_i32", {x, y});
    inner_.f32_to_i32(x, y, n);
  }
  void sgd_update(const float* p, const float* g, float* buf, float* out, std::int64_t n, double lr,
                  double weight_decay, double momentum, bool nesterov,
                  bool first_step) const override {
    seen("sgd_update", {p, g, buf, out});
    inner_.sgd_update(p, g, buf, out, n, lr, weight_decay, momentum, nesterov, first_step);
  }
  void adamw_update(const float* p, const float* g, float* m, float* v, float* out, std::int64_t n,
                    double lr, double weight_decay, double beta1, double beta2, double eps,
                    std::int64_t t) const override {
    seen("adamw_update", {p, g, m, v, out});
    inner_.adamw_update(p, g, m, v, out, n, lr, weight_decay, beta1, beta2, eps, t);
  }

 private:
  // Handles are kept so that no allocation is freed and its address reused by memory the
  // kernels never saw.
  void remember(const Tensor& t) const {
    if (!t.defined()) return;
    std::lock_guard lock(mu_);
    known_.push_back(t);
  }
  // Offsets one past the end are allowed: a pointer to the tail of a tensor with a count of 0.
  bool inside(const void* p) const {
    const auto* q = static_cast<const char*>(p);
    for (const Tensor& t : known_) {
      const auto* base = static_cast<const char*>(t.raw_data());
      if (q >= base && q <= base + t.nbytes()) return true;
    }
    return false;
  }
  void seen(const char* method, std::initializer_list<const void*> pointers = {}) const {
    std::lock_guard lock(mu_);
    ++counts_[phase_][method];
    int i = 0;
    for (const void* p : pointers) {
      if (p != nullptr && !inside(p)) {
        stray_.push_back(std::string(method) + " argument " + std::to_string(i));
      }
      ++i;
    }
  }

  const Kernels& inner_;
  mutable std::mutex mu_;
  mutable std::string phase_;
  mutable std::map<std::string, std::map<std::string, std::int64_t>> counts_;
  mutable std::vector<Tensor> known_;
  mutable std::vector<std::string> stray_;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<float> x = a.to_float_vector();
  const std::vector<float> y = b.to_float_vector();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// The kernel calls each case must make, at least this many of each, per phase: the work its
// layer does, so that a layer doing any of it some other way (a direct cpu:: call, an inline
// loop) fails here. `in` is the input gradient's work, `w` the weight gradients'.
using Calls = std::map<std::string, std::int64_t>;
struct Expected {
  Calls forward;
  Calls in;
  Calls w;
};

Calls with(Calls c, const std::string& method, std::int64_t n) {
  c[method] = n;
  return c;
}

const std::map<std::string, Expected>& expected_calls() {
  const Calls lin_fwd{{"gemm", 1}, {"bias_act_forward", 1}};
  const Calls lin_act{{"gemm", 1}, {"act_backward_bias", 1}};
  const Calls conv_fwd{{"im2col", 1}, {"gemm", 1}, {"row_bias_act_forward", 1}, {"cm_to_nchw", 1}};
  const Calls conv_in{{"nchw_to_cm", 1}, {"gemm", 1}, {"col2im", 1}};
  const Calls conv_w{{"nchw_to_cm", 1}, {"im2col", 1}, {"gemm", 1}, {"row_sum", 1}};
  const Calls block_fwd{{"layer_norm_forward", 2},
                        {"gemm", 4},
                        {"bias_act_forward", 4},
                        {"causal_attention_forward", 1},
                        {"add", 2}};
  const Calls block_in{{"gemm", 4},
                       {"act_backward", 1},
                       {"layer_norm_backward_input", 2},
                       {"causal_attention_backward", 1},
                       {"add", 2}};
  const Calls block_w{{"gemm", 4}, {"column_sum", 4}, {"layer_norm_backward_weight", 2}};
  static const std::map<std::string, Expected> m{
      {"linear", {lin_fwd, {{"gemm", 1}}, {{"gemm", 1}, {"column_sum", 1}}}},
      {"linear_relu", {lin_fwd, lin_act, lin_act}},
      {"linear_gelu", {lin_fwd, lin_act, lin_act}},
      {"linear_nobias", {lin_fwd, {{"gemm", 1}}, {{"gemm", 1}}}},
      {"relu", {{{"act_forward", 1}}, {{"act_backward", 1}}, {}}},
      {"gelu", {{{"act_forward", 1}}, {{"act_backward", 1}}, {}}},
      {"conv_relu", {conv_fwd, with(conv_in, "act_backward", 1), with(conv_w, "act_backward", 1)}},
      {"conv_none", {conv_fwd, conv_in, conv_w}},
      // Two chunks: every chunk's work goes through the kernels.
      {"conv_chunks",
       {with(with(with(conv_fwd, "im2col", 2), "row_bias_act_forward", 2), "cm_to_nchw", 2),
        with(with(conv_in, "col2im", 2), "act_backward", 1),
        with(with(conv_w, "row_sum", 2), "act_backward", 1)}},
      // An empty batch still scales both gradients by beta.
      {"conv_empty", {{}, {}, {{"scale", 2}}}},
      {"dropout", {{{"dropout_apply", 1}}, {{"dropout_apply", 1}}, {}}},
      {"dropout_eval", {{}, {}, {}}},
      {"flatten", {{}, {}, {}}},
      {"layer_norm",
       {{{"layer_norm_forward", 1}},
        {{"layer_norm_backward_input", 1}},
        {{"layer_norm_backward_weight", 1}}}},
      {"max_pool", {{{"max_pool_forward", 1}}, {{"max_pool_backward", 1}}, {}}},
      {"max_pool_pad", {{{"max_pool_forward", 1}}, {{"max_pool_backward", 1}}, {}}},
      {"conv_1x3", {conv_fwd, with(conv_in, "act_backward", 1), with(conv_w, "act_backward", 1)}},
      {"conv_7x1", {conv_fwd, conv_in, conv_w}},
      // The buffers' slots take the slice's sums (a one-row column sum each).
      {"batch_norm",
       {{{"batch_norm_forward", 1}},
        {{"batch_norm_backward_input", 1}},
        {{"batch_norm_backward_weight", 1}, {"column_sum", 3}}}},
      {"batch_norm_eval",
       {{{"batch_norm_inference", 2}, {"fill", 2}},
        {{"batch_norm_inference", 1}, {"fill", 1}},
        {{"batch_norm_backward_weight", 1}, {"scale", 3}}}},
      {"avg_pool",
       {{{"im2col", 1}, {"column_sum", 1}}, {{"fill", 1}, {"gemm", 1}, {"col2im", 1}}, {}}},
      {"avg_pool_pad",
       {{{"im2col", 1}, {"column_sum", 1}}, {{"fill", 1}, {"gemm", 1}, {"col2im", 1}}, {}}},
      {"global_avg_pool", {{{"row_sum", 1}}, {{"fill", 1}, {"gemm", 1}}, {}}},
      {"attention",
       {{{"gemm", 2}, {"bias_act_forward", 2}, {"causal_attention_forward", 1}},
        {{"gemm", 2}, {"causal_attention_backward", 1}},
        {{"gemm", 2}, {"column_sum", 2}}}},
      {"block", {with(block_fwd, "dropout_apply", 2), with(block_in, "dropout_apply", 2), block_w}},
      {"block_eval", {block_fwd, block_in, block_w}},
      {"lstm",
       {{{"gemm", 2}, {"bias_act_forward", 1}, {"act_forward", 3}, {"multiply", 2}},
        {{"gemm", 2}, {"act_backward", 4}, {"multiply", 4}},
        {{"gemm", 2}, {"column_sum", 1}}}},
      {"bilstm",
       {{{"gemm", 4}, {"bias_act_forward", 2}, {"act_forward", 6}, {"multiply", 4}},
        {{"gemm", 4}, {"act_backward", 8}, {"multiply", 8}},
        {{"gemm", 4}, {"column_sum", 2}}}},
      {"seq_attention",
       {{{"gemm", 3}, {"softmax_forward", 1}, {"copy_2d", 1}},
        {{"gemm", 4}, {"softmax_backward", 1}},
        {{"gemm", 1}}}},
      {"embedding_pos",
       {{{"embedding_forward", 1}}, {}, {{"embedding_backward", 1}, {"scale", 1}}}},
      {"embedding", {{{"embedding_forward", 1}}, {}, {{"embedding_backward", 1}}}},
  };
  return m;
}

// Per method, the larger of the two: a fused backward does at least what each half does.
Calls at_least_both(const Calls& a, const Calls& b) {
  Calls c = a;
  for (const auto& [method, n] : b) c[method] = std::max(c[method], n);
  return c;
}

void expect_calls(const RecordingKernels& rec, const std::string& phase, const Calls& want,
                  const std::string& who) {
  const Calls got = rec.counts(phase);
  for (const auto& [method, n] : want) {
    const auto it = got.find(method);
    EXPECT_GE(it == got.end() ? 0 : it->second, n)
        << who << " " << phase << ": too few " << method << " calls through the kernels";
  }
}

class KernelsSeam : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelsSeam, LayerComputesOnlyThroughContextKernels) {
  LayerCase lc;
  for (LayerCase& c : layer_cases()) {
    if (c.name == GetParam()) lc = c;
  }
  ASSERT_TRUE(lc.layer) << GetParam();
  const auto want = run_case(lc, Context{true, 42, 1});

  const RecordingKernels rec(cpu_kernels());
  Context ctx{true, 42, 1};
  ctx.kernels = &rec;
  const auto got = run_case(
      lc, ctx, [&](const Tensor& t) { rec.hand_in(t); },
      [&](const std::string& phase) { rec.begin_phase(phase); });

  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_TRUE(same_bits(got[i].second, want[i].second)) << got[i].first << " differs";
    // Outputs are either the kernels' allocations or views of what the test handed in.
    EXPECT_TRUE(rec.knows(got[i].second)) << got[i].first << " was not allocated by the kernels";
  }
  EXPECT_EQ(rec.stray(), std::vector<std::string>{}) << "pointers into memory the kernels "
                                                        "never allocated";
  const Expected& e = expected_calls().at(GetParam());
  const std::string who = lc.layer->describe();
  expect_calls(rec, "forward", e.forward, who);
  expect_calls(rec, "backward", at_least_both(e.in, e.w), who);
  expect_calls(rec, "backward_into", e.w, who);
  expect_calls(rec, "backward_input", e.in, who);
  expect_calls(rec, "backward_weight", e.w, who);
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const LayerCase& c : layer_cases()) names.push_back(c.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllLayers, KernelsSeam, ::testing::ValuesIn(case_names()),
                         [](const auto& p) { return p.param; });

TEST(KernelsSeam, EveryCaseHasExpectations) {
  for (const std::string& name : case_names()) {
    EXPECT_TRUE(expected_calls().contains(name)) << name;
  }
}

// A whole model (forward, fused backward, then split backward) through the recording kernels
// gives the default run's bits, and touches no memory the kernels did not hand out.
TEST(KernelsSeam, GptModelRunsThroughContextKernels) {
  ModelSpec spec = gpt_spec(2, 16, 2, 6, 11);
  spec.dropout = 0.2f;
  const Model m = Model::build(spec);
  const std::int64_t batch = 3;
  std::vector<std::int32_t> ids;
  for (std::int64_t i = 0; i < shape_numel(m.input_shape(batch)); ++i) {
    ids.push_back(static_cast<std::int32_t>((i * 7 + 3) % 11));
  }
  const Tensor x = Tensor::from_vector(ids, m.input_shape(batch));
  const ParamSet params = m.init_params(3);
  const Tensor dy = random_tensor(m.activation_shapes(batch).back(), 8);

  auto run = [&](const Context& ctx, const HandIn& hand_in) {
    std::vector<Tensor> out;
    ParamSet fused;
    ParamSet split;
    for (std::int64_t i = 0; i < params.size(); ++i) {
      fused.add(params.name(i), random_tensor(params[i].shape(), 50 + i));
      split.add(params.name(i), random_tensor(params[i].shape(), 90 + i));
      hand_in(params[i]);
      hand_in(fused[i]);
      hand_in(split[i]);
    }
    hand_in(x);
    hand_in(dy);
    Model::RangeForward f = m.forward(ctx, params, x, 0, m.num_layers());
    out.push_back(f.y);
    std::vector<Saved> saved = f.saved;
    m.backward(ctx, params, saved, dy, 0, m.num_layers(), false, fused, 0.5f, 0.25f);
    saved = f.saved;
    m.backward_input(ctx, params, saved, dy, 0, m.num_layers(), false);
    m.backward_weight(ctx, saved, 0, m.num_layers(), split);
    for (std::int64_t i = 0; i < params.size(); ++i) {
      out.push_back(fused[i]);
      out.push_back(split[i]);
    }
    return out;
  };
  const std::vector<Tensor> want = run(Context{true, 11, 0}, [](const Tensor&) {});
  const RecordingKernels rec(cpu_kernels());
  Context ctx{true, 11, 0};
  ctx.kernels = &rec;
  const std::vector<Tensor> got = run(ctx, [&](const Tensor& t) { rec.hand_in(t); });
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_bits(got[i], want[i])) << i;
  EXPECT_TRUE(rec.knows(got[0]));
  EXPECT_EQ(rec.stray(), std::vector<std::string>{});
  EXPECT_GT(rec.count("gemm"), 0);
  EXPECT_GT(rec.count("embedding_backward"), 0);
  EXPECT_GT(rec.count("dropout_apply"), 0);
}

// The checker itself: a layer that computes with cpu::gemm into a Tensor::empty of its own is
// caught (no gemm through the kernels, an output they did not allocate).
class BypassingLinear final : public Layer {
 public:
  std::string kind() const override { return "bypass"; }
  std::string describe() const override { return "bypass"; }
  Shape output_shape(const Shape& input) const override { return input; }
  ForwardResult forward(const Context& /*ctx*/, ParamView /*params*/,
                        const Tensor& x) const override {
    Tensor y = Tensor::empty(x.shape());
    const std::int64_t n = x.dim(0);
    cpu::gemm(false, false, n, n, n, 1.0f, x.data<float>(), n, x.data<float>(), n, 0.0f,
              y.data<float>(), n);
    return {y, {}};
  }
  Tensor backward_input(const Context& /*ctx*/, ParamView /*params*/, Saved& /*saved*/,
                        const Tensor& dy) const override {
    return dy;
  }
};

TEST(KernelsSeam, CheckerCatchesALayerThatBypassesTheKernels) {
  const RecordingKernels rec(cpu_kernels());
  Context ctx{true, 1, 0};
  ctx.kernels = &rec;
  const Tensor x = random_tensor({4, 4}, 1);
  rec.hand_in(x);
  const ForwardResult r = BypassingLinear().forward(ctx, {}, x);
  EXPECT_EQ(rec.count("gemm"), 0);
  EXPECT_EQ(rec.compute_calls(), 0);
  EXPECT_FALSE(rec.knows(r.y));
}

// The optimizers update through the kernels they are given (a cuda executor's enqueue on its
// stream): every update call goes through them, the state they create comes from them, and
// the results are those of the CPU's step, bit for bit.
TEST(KernelsSeam, OptimizersUpdateThroughTheGivenKernels) {
  for (const char* kind : {"sgd", "adamw"}) {
    for (const double momentum : {0.0, 0.9}) {
      if (std::string(kind) == "adamw" && momentum != 0.0) continue;
      OptimizerSpec spec;
      spec.kind = kind;
      spec.lr = 0.05;
      spec.momentum = std::string(kind) == "sgd" ? momentum : 0.0;
      spec.weight_decay = 0.01;
      ParamSet direct;
      ParamSet through;
      ParamSet grads;
      for (int i = 0; i < 3; ++i) {
        const Tensor p = random_tensor({5, 7 + i}, 10 + static_cast<std::uint64_t>(i));
        direct.add("p" + std::to_string(i), p.clone());
        through.add("p" + std::to_string(i), p.clone());
        grads.add("p" + std::to_string(i),
                  random_tensor({5, 7 + i}, 20 + static_cast<std::uint64_t>(i)));
      }
      const RecordingKernels rec(cpu_kernels());
      for (std::int64_t i = 0; i < through.size(); ++i) {
        rec.hand_in(through[i]);
        rec.hand_in(grads[i]);
      }
      auto a = make_optimizer(spec);
      auto b = make_optimizer(spec);
      for (int step = 0; step < 3; ++step) {
        a->step(direct, grads);
        b->step(through, grads, rec);
        for (std::int64_t i = 0; i < through.size(); ++i) rec.hand_in(through[i]);
      }
      const std::string what = std::string(kind) + " momentum " + std::to_string(momentum);
      EXPECT_EQ(rec.count(std::string(kind) + "_update"), 9) << what;
      EXPECT_EQ(rec.stray(), std::vector<std::string>{}) << what;
      for (std::int64_t i = 0; i < through.size(); ++i) {
        EXPECT_EQ(through[i].to_float_vector(), direct[i].to_float_vector()) << what;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::models::testing
