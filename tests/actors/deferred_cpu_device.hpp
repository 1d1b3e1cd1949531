#pragma once
// A CPU device that behaves like a GPU for the tests: its kernels do not run when called but are
// enqueued on a cpu Stream (models::Kernels' contract allows it), its executor reports
// completion through an Event, and the memory its kernels allocate is filled with NaN at once,
// so anything that reads a result before the device has produced it (a host-side copy of an
// activation, a loss read at submission) or frees memory the queued work still uses (the
// stage's holds, the executor's temporaries) shows as wrong numbers, or as a use after free
// under the sanitizers. The pipeline's asynchronous path can so be tested without a GPU.
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "models/executor.hpp"
#include "models/kernels/cpu/cross_entropy.hpp"
#include "models/kernels/kernels.hpp"
#include "models/optimizer.hpp"
#include "runtime/stream.hpp"

namespace tandem::actors::testing {

using models::Activation;
using models::ConvGeometry;

class DeferredCpuKernels final : public models::Kernels {
 public:
  Device device() const override { return Device::cpu(); }
  Stream& stream() const { return stream_; }

  Tensor empty(const Shape& shape, DType dtype = DType::f32) const override {
    Tensor t = Tensor::empty(shape, dtype, Device::cpu());
    if (dtype == DType::f32) t.fill(std::numeric_limits<float>::quiet_NaN());
    allocations_.push_back(t);
    return t;
  }
  Tensor to_f32(const Tensor& t) const override {
    if (t.dtype() == DType::f32) return t;
    throw std::invalid_argument("DeferredCpuKernels::to_f32: " + t.describe() + " (f32 only)");
  }
  std::vector<Tensor> take_allocations() const { return std::exchange(allocations_, {}); }
  void copy_bytes(const void* src, void* dst, std::size_t bytes) const override {
    stream_.enqueue([=] { models::cpu_kernels().copy_bytes(src, dst, bytes); });
  }

  void f32_to_i32(const float* x, std::int32_t* y, std::int64_t n) const override {
    stream_.enqueue([=] { models::cpu_kernels().f32_to_i32(x, y, n); });
  }
  void copy(const float* src, float* dst, std::int64_t n) const override {
    stream_.enqueue([=] { models::cpu_kernels().copy(src, dst, n); });
  }
  void scale(float* x, std::int64_t n, float beta) const override {
    stream_.enqueue([=] { models::cpu_kernels().scale(x, n, beta); });
  }
  void add(const float* a, const float* b, float* dst, std::int64_t n) const override {
    stream_.enqueue([=] { models::cpu_kernels().add(a, b, dst, n); });
  }
  void copy_2d(const float* src, std::int64_t src_ld, float* dst, std::int64_t dst_ld,
               std::int64_t rows, std::int64_t cols) const override {
    stream_.enqueue([=] { models::cpu_kernels().copy_2d(src, src_ld, dst, dst_ld, rows, cols); });
  }
  void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
            const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
            float* c, std::int64_t ldc) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    });
  }
  void bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                        Activation act, float* pre) const override {
    stream_.enqueue([=] { models::cpu_kernels().bias_act_forward(y, bias, rows, cols, act, pre); });
  }
  void act_forward(const float* x, float* y, std::int64_t n, Activation act) const override {
    stream_.enqueue([=] { models::cpu_kernels().act_forward(x, y, n, act); });
  }
  void act_backward(const float* dy, const float* saved, float* dz, std::int64_t n,
                    Activation act) const override {
    stream_.enqueue([=] { models::cpu_kernels().act_backward(dy, saved, dz, n, act); });
  }
  void act_backward_bias(const float* dy, const float* saved, float* dz, std::int64_t rows,
                         std::int64_t cols, Activation act, float* db, float alpha,
                         float beta) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().act_backward_bias(dy, saved, dz, rows, cols, act, db, alpha, beta);
    });
  }
  void column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
                  float* out) const override {
    stream_.enqueue([=] { models::cpu_kernels().column_sum(x, rows, cols, alpha, beta, out); });
  }
  void row_bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                            Activation act) const override {
    stream_.enqueue([=] { models::cpu_kernels().row_bias_act_forward(y, bias, rows, cols, act); });
  }
  void row_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
               float* out) const override {
    stream_.enqueue([=] { models::cpu_kernels().row_sum(x, rows, cols, alpha, beta, out); });
  }
  void multiply(const float* a, const float* b, float alpha, float beta, float* out,
                std::int64_t n) const override {
    stream_.enqueue([=] { models::cpu_kernels().multiply(a, b, alpha, beta, out, n); });
  }
  void exp(const float* x, float* y, std::int64_t n) const override {
    stream_.enqueue([=] { models::cpu_kernels().exp(x, y, n); });
  }
  void log(const float* x, float* y, std::int64_t n) const override {
    stream_.enqueue([=] { models::cpu_kernels().log(x, y, n); });
  }
  void fill(float* x, std::int64_t n, float value) const override {
    stream_.enqueue([=] { models::cpu_kernels().fill(x, n, value); });
  }
  void softmax_forward(const float* x, float* y, std::int64_t rows,
                       std::int64_t cols) const override {
    stream_.enqueue([=] { models::cpu_kernels().softmax_forward(x, y, rows, cols); });
  }
  void softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows,
                        std::int64_t cols) const override {
    stream_.enqueue([=] { models::cpu_kernels().softmax_backward(y, dy, dx, rows, cols); });
  }
  void row_max(const float* x, std::int64_t rows, std::int64_t cols, float* out) const override {
    stream_.enqueue([=] { models::cpu_kernels().row_max(x, rows, cols, out); });
  }
  void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                          float* xhat, float* rstd, std::int64_t rows, std::int64_t cols,
                          float eps) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().layer_norm_forward(x, gamma, beta, y, xhat, rstd, rows, cols, eps);
    });
  }
  void layer_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                 const float* gamma, float* dx, std::int64_t rows,
                                 std::int64_t cols) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().layer_norm_backward_input(dy, xhat, rstd, gamma, dx, rows, cols);
    });
  }
  void layer_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                  std::int64_t rows, std::int64_t cols, float alpha,
                                  float beta) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().layer_norm_backward_weight(dy, xhat, dgamma, dbeta, rows, cols, alpha,
                                                       beta);
    });
  }
  void batch_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                          float* xhat, float* rstd, float* sums, std::int64_t n, std::int64_t c,
                          std::int64_t hw, float eps) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().batch_norm_forward(x, gamma, beta, y, xhat, rstd, sums, n, c, hw, eps);
    });
  }
  void batch_norm_inference(const float* x, const float* gamma, const float* beta,
                            const float* mean, const float* var, float* y, std::int64_t n,
                            std::int64_t c, std::int64_t hw, float eps) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().batch_norm_inference(x, gamma, beta, mean, var, y, n, c, hw, eps);
    });
  }
  void batch_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                 const float* gamma, float* dx, std::int64_t n, std::int64_t c,
                                 std::int64_t hw) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().batch_norm_backward_input(dy, xhat, rstd, gamma, dx, n, c, hw);
    });
  }
  void batch_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                  std::int64_t n, std::int64_t c, std::int64_t hw, float alpha,
                                  float beta) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().batch_norm_backward_weight(dy, xhat, dgamma, dbeta, n, c, hw, alpha,
                                                       beta);
    });
  }
  void batch_norm_update_running(const float* sum, const float* sum_sq, const float* count,
                                 const float* mean, const float* var, const float* updates,
                                 float* mean_out, float* var_out, float* updates_out,
                                 std::int64_t c, float momentum) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().batch_norm_update_running(sum, sum_sq, count, mean, var, updates,
                                                      mean_out, var_out, updates_out, c, momentum);
    });
  }
  void embedding_forward(const std::int32_t* ids, const float* table, const float* pos, float* y,
                         std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                         std::int64_t dim) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().embedding_forward(ids, table, pos, y, batch, seq, vocab, dim);
    });
  }
  void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable, float* dpos,
                          std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                          std::int64_t dim, float alpha, float beta) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().embedding_backward(ids, dy, dtable, dpos, batch, seq, vocab, dim, alpha,
                                               beta);
    });
  }
  void dropout_apply(const float* x, float* y, std::int64_t samples, std::int64_t per_sample,
                     float p, std::uint64_t key, std::int64_t first_sample) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().dropout_apply(x, y, samples, per_sample, p, key, first_sample);
    });
  }
  void causal_attention_forward(const float* qkv, float* out, float* probs, std::int64_t batch,
                                std::int64_t seq, std::int64_t heads,
                                std::int64_t d_head) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().causal_attention_forward(qkv, out, probs, batch, seq, heads, d_head);
    });
  }
  void causal_attention_backward(const float* qkv, const float* probs, const float* dout,
                                 float* dqkv, std::int64_t batch, std::int64_t seq,
                                 std::int64_t heads, std::int64_t d_head) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().causal_attention_backward(qkv, probs, dout, dqkv, batch, seq, heads,
                                                      d_head);
    });
  }
  void im2col(const float* x, const ConvGeometry& g, std::int64_t n, float* col) const override {
    stream_.enqueue([=] { models::cpu_kernels().im2col(x, g, n, col); });
  }
  void col2im(const float* col, const ConvGeometry& g, std::int64_t n, float* dx) const override {
    stream_.enqueue([=] { models::cpu_kernels().col2im(col, g, n, dx); });
  }
  void nchw_to_cm(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                  float* out) const override {
    stream_.enqueue([=] { models::cpu_kernels().nchw_to_cm(x, n, c, hw, out); });
  }
  void cm_to_nchw(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                  float* out) const override {
    stream_.enqueue([=] { models::cpu_kernels().cm_to_nchw(x, n, c, hw, out); });
  }
  void max_pool_forward(const float* x, const ConvGeometry& g, std::int64_t n, float* y,
                        std::int32_t* argmax) const override {
    stream_.enqueue([=] { models::cpu_kernels().max_pool_forward(x, g, n, y, argmax); });
  }
  void max_pool_backward(const float* dy, const std::int32_t* argmax, const ConvGeometry& g,
                         std::int64_t n, float* dx) const override {
    stream_.enqueue([=] { models::cpu_kernels().max_pool_backward(dy, argmax, g, n, dx); });
  }
  void sgd_update(const float* p, const float* g, float* buf, float* out, std::int64_t n, double lr,
                  double weight_decay, double momentum, bool nesterov,
                  bool first_step) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().sgd_update(p, g, buf, out, n, lr, weight_decay, momentum, nesterov,
                                       first_step);
    });
  }
  void adamw_update(const float* p, const float* g, float* m, float* v, float* out, std::int64_t n,
                    double lr, double weight_decay, double beta1, double beta2, double eps,
                    std::int64_t t) const override {
    stream_.enqueue([=] {
      models::cpu_kernels().adamw_update(p, g, m, v, out, n, lr, weight_decay, beta1, beta2, eps,
                                         t);
    });
  }

 private:
  mutable Stream stream_;
  mutable std::vector<Tensor> allocations_;
};

// The executor of that device, shaped like the cuda one (models/executor.cpp).
class DeferredCpuExecutor final : public models::Executor {
 public:
  Device device() const override { return Device::cpu(); }

  models::Completion run(models::Context ctx,
                         const std::function<void(const models::Context&)>& work) override {
    ctx.sim_clock = nullptr;
    ctx.kernels = &kernels_;
    models::Completion c;
    c.started = kernels_.stream().record_timed();
    work(ctx);
    c.done = kernels_.stream().record_timed();
    std::vector<Tensor> keep = kernels_.take_allocations();
    c.done.on_complete([keep = std::move(keep)]() mutable { keep.clear(); });
    return c;
  }

  models::LossResult loss(const models::Context&, const models::Loss& loss, const Tensor& logits,
                          const Tensor& targets, float grad_scale) const override {
    if (loss.name() != "cross_entropy") {
      throw std::invalid_argument("deferred cpu device: only cross_entropy, not " + loss.name());
    }
    const std::int64_t classes = logits.shape().back();
    const std::int64_t rows = targets.numel();
    models::LossResult r;
    r.count = rows;
    r.dlogits = kernels_.empty(logits.shape());
    r.pending_sums = Tensor::zeros({4}, DType::f32);
    kernels_.stream().enqueue([logits, targets, dlogits = r.dlogits, sums = r.pending_sums, rows,
                               classes, grad_scale]() mutable {
      const models::cpu::CrossEntropySums s =
          models::cpu::cross_entropy(static_cast<const float*>(logits.raw_data()),
                                     static_cast<const std::int32_t*>(targets.raw_data()), rows,
                                     classes, static_cast<float*>(dlogits.raw_data()), grad_scale);
      auto* bytes = static_cast<unsigned char*>(sums.raw_data());
      std::memcpy(bytes, &s.loss_sum, sizeof s.loss_sum);
      std::memcpy(bytes + sizeof(double), &s.correct, sizeof s.correct);
    });
    return r;
  }

  void step(const models::Context&, models::Optimizer& optimizer, models::ParamSet& params,
            const models::ParamSet& grads) const override {
    optimizer.step(params, grads, kernels_);
  }

 private:
  DeferredCpuKernels kernels_;
};

}  // namespace tandem::actors::testing
