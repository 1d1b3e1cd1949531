#pragma once
// The per-device kernel interface: the one seam between the layers and the devices. A layer
// takes its Kernels from its Context and never asks which device it is on: it allocates its
// outputs and scratch through empty() and computes through the methods below, all of which take
// pointers into memory of device() (Tensor::raw_data() of tensors on that device). The CPU
// implementation runs each call to completion before it returns; the CUDA one enqueues it on
// the Context's stream and returns at once, so results are ready only when the Executor says
// the work is done (models/executor.hpp).
//
// The sim device has no Kernels: its costs are configured per layer, not per kernel, so
// Model dispatches a whole layer op to detail::sim_forward / sim_backward instead
// (models/detail/sim_ops.hpp).
//
// The methods mirror models/kernels/cpu/*.hpp, whose comments define their semantics; the
// CUDA twins in models/kernels/cuda/ take the same arguments plus a stream.
#include <cstdint>
#include <memory>

#include "models/kernels/cpu/activation.hpp"
#include "models/kernels/cpu/conv.hpp"
#include "models/kernels/cpu/cross_entropy.hpp"
#include "runtime/device.hpp"
#include "runtime/dtype.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models {

using cpu::Activation;
using cpu::ConvGeometry;
using cpu::CrossEntropySums;

// The element-wise losses a device computes in one kernel (models/losses/).
enum class PointwiseLoss : std::uint8_t {
  squared_error,    // (x - t)^2, gradient 2 (x - t)
  bce_with_logits,  // max(x, 0) - x t + log(1 + exp(-|x|)), gradient sigmoid(x) - t
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  virtual Device device() const = 0;

  // --- memory on device() ---
  // A tensor whose contents are unspecified (the caller writes every element).
  virtual Tensor empty(const Shape& shape, DType dtype = DType::f32) const = 0;
  // `t` (a tensor on device()) as f32: itself when it already is; a converting copy otherwise.
  virtual Tensor to_f32(const Tensor& t) const = 0;
  // dst[i] = src[i]; the ranges may not overlap.
  virtual void copy(const float* src, float* dst, std::int64_t n) const = 0;
  // The same for `bytes` bytes of any dtype (joining token ids, say).
  virtual void copy_bytes(const void* src, void* dst, std::size_t bytes) const = 0;
  // y[i] = int32(x[i]), rounding toward zero: token ids that travel as exact floats in a packed
  // model input of mixed dtypes (models/input_layout.hpp) become ids again.
  virtual void f32_to_i32(const float* x, std::int32_t* y, std::int64_t n) const = 0;
  // x[i] = beta * x[i] (beta 0 writes zeros without reading x, which may hold NaN).
  virtual void scale(float* x, std::int64_t n, float beta) const = 0;
  // dst[i] = a[i] + b[i]; dst may alias a or b.
  virtual void add(const float* a, const float* b, float* dst, std::int64_t n) const = 0;
  // Columns of row-major matrices: dst[r * dst_ld + c] = src[r * src_ld + c] for r < rows,
  // c < cols (concatenating along the last dimension and splitting its gradient). The ranges
  // may not overlap.
  virtual void copy_2d(const float* src, std::int64_t src_ld, float* dst, std::int64_t dst_ld,
                       std::int64_t rows, std::int64_t cols) const = 0;

  // --- dense algebra (models/kernels/cpu/gemm.hpp) ---
  virtual void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                    float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                    float beta, float* c, std::int64_t ldc) const = 0;

  // --- bf16 products (cpu/bf16_gemm.hpp): cpu executors at MatmulPrecision::bf16, where the
  // CPU has native bf16 (models/executor.hpp). A layer asks bf16_products() first; the other
  // devices say no (cuda rounds inside gemm) and their bf16 methods throw std::logic_error. ---
  virtual bool bf16_products() const;
  // A bf16 copy of the f32 weight `w` on device(), made once per version of w's storage and
  // kept while that version lives (cpu/bf16_weight_cache.hpp, which also says when a caller
  // must drop_bf16_copy() a weight it wrote in place).
  virtual Tensor bf16_copy(const Tensor& w) const;
  virtual void drop_bf16_copy(const Tensor& w) const;
  // y[i] = x[i] rounded to bf16, to nearest even (cpu/bf16_convert.hpp).
  virtual void to_bf16(const float* x, BFloat16* y, std::int64_t n) const;
  // The same values kept in f32 (y may be x).
  virtual void round_to_bf16(const float* x, float* y, std::int64_t n) const;
  // gemm with A rounded to bf16 here and B already bf16: products of bf16 operands accumulated
  // in f32, into f32 C.
  virtual void gemm_bf16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                         float alpha, const float* a, std::int64_t lda, const BFloat16* b,
                         std::int64_t ldb, float beta, float* c, std::int64_t ldc) const;
  // The same with A bf16 already (an operand rounded once and read by several products).
  virtual void gemm_bf16_ab(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                            std::int64_t k, float alpha, const BFloat16* a, std::int64_t lda,
                            const BFloat16* b, std::int64_t ldb, float beta, float* c,
                            std::int64_t ldc) const;

  // --- activations and reductions (activation.hpp, reduce.hpp) ---
  virtual void bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                                Activation act, float* pre) const = 0;
  virtual void act_forward(const float* x, float* y, std::int64_t n, Activation act) const = 0;
  virtual void act_backward(const float* dy, const float* saved, float* dz, std::int64_t n,
                            Activation act) const = 0;
  virtual void act_backward_bias(const float* dy, const float* saved, float* dz, std::int64_t rows,
                                 std::int64_t cols, Activation act, float* db, float alpha,
                                 float beta) const = 0;
  // out[c] = alpha * sum_r x[r, c] + beta * out[c] over a row-major [rows, cols] matrix.
  virtual void column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha,
                          float beta, float* out) const = 0;
  // In place on a row-major [rows, cols] matrix whose rows are channels (the channel-major
  // layout of a convolution's GEMM): y[r, :] = act(y[r, :] + bias[r]); act is none or relu.
  virtual void row_bias_act_forward(float* y, const float* bias, std::int64_t rows,
                                    std::int64_t cols, Activation act) const = 0;
  // out[r] = alpha * sum_c x[r, c] + beta * out[r] (a convolution's bias gradient).
  virtual void row_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha,
                       float beta, float* out) const = 0;

  // --- element-wise maths and row ops for layers of one's own (cpu/elementwise.hpp,
  // cpu/softmax.hpp, cpu/reduce.hpp) ---
  virtual void multiply(const float* a, const float* b, float alpha, float beta, float* out,
                        std::int64_t n) const = 0;
  virtual void exp(const float* x, float* y, std::int64_t n) const = 0;
  virtual void log(const float* x, float* y, std::int64_t n) const = 0;
  virtual void fill(float* x, std::int64_t n, float value) const = 0;
  virtual void softmax_forward(const float* x, float* y, std::int64_t rows,
                               std::int64_t cols) const = 0;
  virtual void softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows,
                                std::int64_t cols) const = 0;
  // out[r] = max_c x[r, c], cols > 0.
  virtual void row_max(const float* x, std::int64_t rows, std::int64_t cols, float* out) const = 0;

  // --- normalisation, embedding, dropout, attention ---
  virtual void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                  float* xhat, float* rstd, std::int64_t rows, std::int64_t cols,
                                  float eps) const = 0;
  virtual void layer_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                         const float* gamma, float* dx, std::int64_t rows,
                                         std::int64_t cols) const = 0;
  virtual void layer_norm_backward_weight(const float* dy, const float* xhat, float* dgamma,
                                          float* dbeta, std::int64_t rows, std::int64_t cols,
                                          float alpha, float beta) const = 0;
  virtual void embedding_forward(const std::int32_t* ids, const float* table, const float* pos,
                                 float* y, std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                                 std::int64_t dim) const = 0;
  virtual void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable,
                                  float* dpos, std::int64_t batch, std::int64_t seq,
                                  std::int64_t vocab, std::int64_t dim, float alpha,
                                  float beta) const = 0;
  virtual void dropout_apply(const float* x, float* y, std::int64_t samples,
                             std::int64_t per_sample, float p, std::uint64_t key,
                             std::int64_t first_sample) const = 0;
  virtual void causal_attention_forward(const float* qkv, float* out, float* probs,
                                        std::int64_t batch, std::int64_t seq, std::int64_t heads,
                                        std::int64_t d_head) const = 0;
  virtual void causal_attention_backward(const float* qkv, const float* probs, const float* dout,
                                         float* dqkv, std::int64_t batch, std::int64_t seq,
                                         std::int64_t heads, std::int64_t d_head) const = 0;
  // Fused causal attention, where a device offers it for this head size (today: cuda at bf16
  // precision, d_head 64; models/kernels/cuda/flash_attention.hpp): the [seq, seq]
  // probabilities never reach memory; forward keeps each row's log-sum-exp lse [batch, heads,
  // seq] instead, and backward recomputes them from qkv, the forward's out and lse. The others
  // say no, and their fused methods throw std::logic_error.
  virtual bool fused_attention(std::int64_t d_head) const;
  virtual void fused_attention_forward(const float* qkv, float* out, float* lse, std::int64_t batch,
                                       std::int64_t seq, std::int64_t heads,
                                       std::int64_t d_head) const;
  virtual void fused_attention_backward(const float* qkv, const float* out, const float* lse,
                                        const float* dout, float* dqkv, std::int64_t batch,
                                        std::int64_t seq, std::int64_t heads,
                                        std::int64_t d_head) const;

  // --- convolution and pooling (conv.hpp) ---
  virtual void im2col(const float* x, const ConvGeometry& g, std::int64_t n, float* col) const = 0;
  virtual void col2im(const float* col, const ConvGeometry& g, std::int64_t n, float* dx) const = 0;
  virtual void nchw_to_cm(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                          float* out) const = 0;
  virtual void cm_to_nchw(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                          float* out) const = 0;
  virtual void max_pool_forward(const float* x, const ConvGeometry& g, std::int64_t n, float* y,
                                std::int32_t* argmax) const = 0;
  virtual void max_pool_backward(const float* dy, const std::int32_t* argmax, const ConvGeometry& g,
                                 std::int64_t n, float* dx) const = 0;

  // --- batch normalisation over NCHW [n, c, hw] (batch_norm.hpp) ---
  virtual void batch_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                  float* xhat, float* rstd, float* sums, std::int64_t n,
                                  std::int64_t c, std::int64_t hw, float eps) const = 0;
  virtual void batch_norm_inference(const float* x, const float* gamma, const float* beta,
                                    const float* mean, const float* var, float* y, std::int64_t n,
                                    std::int64_t c, std::int64_t hw, float eps) const = 0;
  virtual void batch_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                         const float* gamma, float* dx, std::int64_t n,
                                         std::int64_t c, std::int64_t hw) const = 0;
  virtual void batch_norm_backward_weight(const float* dy, const float* xhat, float* dgamma,
                                          float* dbeta, std::int64_t n, std::int64_t c,
                                          std::int64_t hw, float alpha, float beta) const = 0;
  virtual void batch_norm_update_running(const float* sum, const float* sum_sq, const float* count,
                                         const float* mean, const float* var, const float* updates,
                                         float* mean_out, float* var_out, float* updates_out,
                                         std::int64_t c, float momentum) const = 0;

  // --- optimizer updates (the optimizers' inner loops; models/kernels/cuda/optimizer.hpp
  // defines them). Hyper-parameters in the optimizers' own double type, converted to f32 as the
  // optimizers always have. out may alias p.
  // PyTorch's SGD: d = g + wd p; with momentum, buf = d on the first step, momentum * buf + d
  // after, d = nesterov ? d + momentum * buf : buf; out = p - lr d. buf unused at momentum 0.
  virtual void sgd_update(const float* p, const float* g, float* buf, float* out, std::int64_t n,
                          double lr, double weight_decay, double momentum, bool nesterov,
                          bool first_step) const = 0;
  // PyTorch's AdamW at step t (1-based), moments m and v updated in place.
  virtual void adamw_update(const float* p, const float* g, float* m, float* v, float* out,
                            std::int64_t n, double lr, double weight_decay, double beta1,
                            double beta2, double eps, std::int64_t t) const = 0;

  // --- losses on devices whose results are read later (models/losses/; the CPU computes its
  // losses inline and keeps these defaults, which throw std::logic_error). Each writes
  // dx = scale * d(loss_sum)/dx and *sums (device memory, summed in a fixed order so that runs
  // repeat bit for bit); correct is 0 but for cross_entropy_loss.
  virtual void cross_entropy_loss(const float* logits, const std::int32_t* targets,
                                  std::int64_t rows, std::int64_t classes, float* dlogits,
                                  float scale, CrossEntropySums* sums) const;
  virtual void pointwise_loss(PointwiseLoss loss, const float* x, const float* t, std::int64_t n,
                              float* dx, float scale, CrossEntropySums* sums) const;
  // *sums = {sum of the n values, in double, 0}: the value of an application's loss.
  virtual void sum_losses(const float* values, std::int64_t n, CrossEntropySums* sums) const;

  // *out = sum_i x[i]^2 over n floats (out in the device's memory), accumulated in double in a
  // fixed order and rounded to f32 once: a parameter's share of the gradient norm, the same on
  // every run. The default throws std::logic_error (a device without it cannot clip).
  virtual void sum_squares(const float* x, std::int64_t n, float* out) const;
};

// The CPU's kernels (models/kernels/cpu/), for every Context that names no other.
const Kernels& cpu_kernels();
// CPU kernels of their own, whose bf16_products() is `bf16_products` (with a weight cache of
// their own): for a cpu executor at MatmulPrecision::bf16. They use bf16 instructions whatever
// the CPU has; the executor asks cpu::bf16_gemm_native() first.
std::unique_ptr<Kernels> make_cpu_kernels(bool bf16_products);

}  // namespace tandem::models
