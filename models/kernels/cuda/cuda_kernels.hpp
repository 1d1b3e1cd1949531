#pragma once
// The Kernels of a cuda:N device (models/kernels/kernels.hpp): every call enqueues the CUDA
// twin of the CPU kernel on one stream and returns at once. Built with the CUDA backend only
// (callers check TANDEM_HAVE_CUDA).
#include <memory>
#include <vector>

#include "models/kernels/cuda/gemm.hpp"
#include "models/kernels/kernels.hpp"
#include "runtime/stream.hpp"

namespace tandem::models {

class CudaKernels final : public Kernels {
 public:
  // Kernels on stream.device() (a cuda device), GEMMs (attention's included) at `precision`.
  CudaKernels(Stream stream, cuda::GemmPrecision precision = cuda::GemmPrecision::f32);

  Device device() const override { return device_; }
  const Stream& stream() const { return stream_; }
  cuda::GemmPrecision precision() const { return precision_; }

  // Every tensor handed out by empty() (and to_f32) since the last call. All device tensors
  // share one free list of the caching allocator, so a temporary a layer drops while its
  // kernels are still queued could be handed to another stream's work at once: the executor
  // keeps these until an event recorded after the work has completed (docs/devices.md, Memory).
  std::vector<Tensor> take_allocations() const;

  Tensor empty(const Shape& shape, DType dtype = DType::f32) const override;
  Tensor to_f32(const Tensor& t) const override;
  void copy(const float* src, float* dst, std::int64_t n) const override;
  void copy_bytes(const void* src, void* dst, std::size_t bytes) const override;
  void f32_to_i32(const float* x, std::int32_t* y, std::int64_t n) const override;
  void scale(float* x, std::int64_t n, float beta) const override;
  void add(const float* a, const float* b, float* dst, std::int64_t n) const override;
  void copy_2d(const float* src, std::int64_t src_ld, float* dst, std::int64_t dst_ld,
               std::int64_t rows, std::int64_t cols) const override;
  void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
            const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
            float* c, std::int64_t ldc) const override;
  void bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                        Activation act, float* pre) const override;
  void act_forward(const float* x, float* y, std::int64_t n, Activation act) const override;
  void act_backward(const float* dy, const float* saved, float* dz, std::int64_t n,
                    Activation act) const override;
  void act_backward_bias(const float* dy, const float* saved, float* dz, std::int64_t rows,
                         std::int64_t cols, Activation act, float* db, float alpha,
                         float beta) const override;
  void column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
                  float* out) const override;
  void row_bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                            Activation act) const override;
  void row_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
               float* out) const override;
  void multiply(const float* a, const float* b, float alpha, float beta, float* out,
                std::int64_t n) const override;
  void exp(const float* x, float* y, std::int64_t n) const override;
  void log(const float* x, float* y, std::int64_t n) const override;
  void fill(float* x, std::int64_t n, float value) const override;
  void cross_entropy_loss(const float* logits, const std::int32_t* targets, std::int64_t rows,
                          std::int64_t classes, float* dlogits, float scale,
                          CrossEntropySums* sums) const override;
  void pointwise_loss(PointwiseLoss loss, const float* x, const float* t, std::int64_t n, float* dx,
                      float scale, CrossEntropySums* sums) const override;
  void sum_losses(const float* values, std::int64_t n, CrossEntropySums* sums) const override;
  void softmax_forward(const float* x, float* y, std::int64_t rows,
                       std::int64_t cols) const override;
  void softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows,
                        std::int64_t cols) const override;
  void row_max(const float* x, std::int64_t rows, std::int64_t cols, float* out) const override;
  void sum_squares(const float* x, std::int64_t n, float* out) const override;
  void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                          float* xhat, float* rstd, std::int64_t rows, std::int64_t cols,
                          float eps) const override;
  void layer_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                 const float* gamma, float* dx, std::int64_t rows,
                                 std::int64_t cols) const override;
  void layer_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                  std::int64_t rows, std::int64_t cols, float alpha,
                                  float beta) const override;
  void batch_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                          float* xhat, float* rstd, float* sums, std::int64_t n, std::int64_t c,
                          std::int64_t hw, float eps) const override;
  void batch_norm_inference(const float* x, const float* gamma, const float* beta,
                            const float* mean, const float* var, float* y, std::int64_t n,
                            std::int64_t c, std::int64_t hw, float eps) const override;
  void batch_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                 const float* gamma, float* dx, std::int64_t n, std::int64_t c,
                                 std::int64_t hw) const override;
  void batch_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                  std::int64_t n, std::int64_t c, std::int64_t hw, float alpha,
                                  float beta) const override;
  void batch_norm_update_running(const float* sum, const float* sum_sq, const float* count,
                                 const float* mean, const float* var, const float* updates,
                                 float* mean_out, float* var_out, float* updates_out,
                                 std::int64_t c, float momentum) const override;
  void embedding_forward(const std::int32_t* ids, const float* table, const float* pos, float* y,
                         std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                         std::int64_t dim) const override;
  void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable, float* dpos,
                          std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                          std::int64_t dim, float alpha, float beta) const override;
  void dropout_apply(const float* x, float* y, std::int64_t samples, std::int64_t per_sample,
                     float p, std::uint64_t key, std::int64_t first_sample) const override;
  void causal_attention_forward(const float* qkv, float* out, float* probs, std::int64_t batch,
                                std::int64_t seq, std::int64_t heads,
                                std::int64_t d_head) const override;
  void causal_attention_backward(const float* qkv, const float* probs, const float* dout,
                                 float* dqkv, std::int64_t batch, std::int64_t seq,
                                 std::int64_t heads, std::int64_t d_head) const override;
  bool fused_attention(std::int64_t d_head) const override;
  void fused_attention_forward(const float* qkv, float* out, float* lse, std::int64_t batch,
                               std::int64_t seq, std::int64_t heads,
                               std::int64_t d_head) const override;
  void fused_attention_backward(const float* qkv, const float* out, const float* lse,
                                const float* dout, float* dqkv, std::int64_t batch,
                                std::int64_t seq, std::int64_t heads,
                                std::int64_t d_head) const override;
  void im2col(const float* x, const ConvGeometry& g, std::int64_t n, float* col) const override;
  void col2im(const float* col, const ConvGeometry& g, std::int64_t n, float* dx) const override;
  void nchw_to_cm(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                  float* out) const override;
  void cm_to_nchw(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                  float* out) const override;
  void max_pool_forward(const float* x, const ConvGeometry& g, std::int64_t n, float* y,
                        std::int32_t* argmax) const override;
  void max_pool_backward(const float* dy, const std::int32_t* argmax, const ConvGeometry& g,
                         std::int64_t n, float* dx) const override;
  void sgd_update(const float* p, const float* g, float* buf, float* out, std::int64_t n, double lr,
                  double weight_decay, double momentum, bool nesterov,
                  bool first_step) const override;
  void adamw_update(const float* p, const float* g, float* m, float* v, float* out, std::int64_t n,
                    double lr, double weight_decay, double beta1, double beta2, double eps,
                    std::int64_t t) const override;

 private:
  Stream stream_;
  void* native_;  // the cudaStream_t
  Device device_;
  cuda::GemmPrecision precision_;
  bool fused_attention_ = true;
  // Filled by empty() on the thread that runs the work (an executor's); see take_allocations.
  mutable std::vector<Tensor> allocations_;
};

}  // namespace tandem::models
