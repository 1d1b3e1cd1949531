#include "models/kernels/cuda/cuda_kernels.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "models/kernels/cuda/activation.hpp"
#include "models/kernels/cuda/attention.hpp"
#include "models/kernels/cuda/batch_norm.hpp"
#include "models/kernels/cuda/conv.hpp"
#include "models/kernels/cuda/cross_entropy.hpp"
#include "models/kernels/cuda/dropout.hpp"
#include "models/kernels/cuda/elementwise.hpp"
#include "models/kernels/cuda/embedding.hpp"
#include "models/kernels/cuda/flash_attention.hpp"
#include "models/kernels/cuda/layer_norm.hpp"
#include "models/kernels/cuda/optimizer.hpp"
#include "models/kernels/cuda/pointwise_loss.hpp"
#include "models/kernels/cuda/reduce.hpp"
#include "models/kernels/cuda/softmax.hpp"

namespace tandem::models {

CudaKernels::CudaKernels(Stream stream, cuda::GemmPrecision precision)
    : stream_(std::move(stream)),
      native_(stream_.native_handle()),
      device_(stream_.device()),
      precision_(precision) {
  // TANDEM_FUSED_ATTENTION=0: bf16 attention materialises its probabilities as at the other
  // precisions (for comparisons; docs/devices.md).
  const char* fused = std::getenv("TANDEM_FUSED_ATTENTION");
  fused_attention_ = fused == nullptr || std::string(fused) != "0";
  if (!device_.is_cuda()) {
    throw std::invalid_argument("CudaKernels: a stream on " + device_.str() +
                                ", not on a cuda device");
  }
}

std::vector<Tensor> CudaKernels::take_allocations() const {
  return std::exchange(allocations_, {});
}

Tensor CudaKernels::empty(const Shape& shape, DType dtype) const {
  Tensor t = Tensor::empty(shape, dtype, device_);
  allocations_.push_back(t);
  return t;
}

Tensor CudaKernels::to_f32(const Tensor& t) const {
  if (t.dtype() == DType::f32) return t;
  if (t.dtype() != DType::i32) {
    throw std::invalid_argument("CudaKernels::to_f32: " + t.describe() +
                                " (f32 and i32 tensors only)");
  }
  Tensor out = empty(t.shape(), DType::f32);
  cuda::i32_to_f32(static_cast<const std::int32_t*>(t.raw_data()),
                   static_cast<float*>(out.raw_data()), t.numel(), native_);
  return out;
}

void CudaKernels::copy(const float* src, float* dst, std::int64_t n) const {
  if (n > 0) copy_bytes(src, dst, static_cast<std::size_t>(n) * sizeof(float));
}

void CudaKernels::copy_bytes(const void* src, void* dst, std::size_t bytes) const {
  if (bytes == 0) return;
  const cudaError_t status = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                             static_cast<cudaStream_t>(native_));
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("CudaKernels::copy: ") + cudaGetErrorString(status));
  }
}

void CudaKernels::f32_to_i32(const float* x, std::int32_t* y, std::int64_t n) const {
  cuda::f32_to_i32(x, y, n, native_);
}

void CudaKernels::copy_2d(const float* src, std::int64_t src_ld, float* dst, std::int64_t dst_ld,
                          std::int64_t rows, std::int64_t cols) const {
  if (rows <= 0 || cols <= 0) return;
  constexpr auto f = sizeof(float);
  const cudaError_t status = cudaMemcpy2DAsync(
      dst, static_cast<std::size_t>(dst_ld) * f, src, static_cast<std::size_t>(src_ld) * f,
      static_cast<std::size_t>(cols) * f, static_cast<std::size_t>(rows), cudaMemcpyDeviceToDevice,
      static_cast<cudaStream_t>(native_));
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("CudaKernels::copy_2d: ") + cudaGetErrorString(status));
  }
}

void CudaKernels::scale(float* x, std::int64_t n, float beta) const {
  cuda::scale(x, n, beta, native_);
}

void CudaKernels::add(const float* a, const float* b, float* dst, std::int64_t n) const {
  cuda::add(a, b, dst, n, native_);
}

void CudaKernels::gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                       float alpha, const float* a, std::int64_t lda, const float* b,
                       std::int64_t ldb, float beta, float* c, std::int64_t ldc) const {
  cuda::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, precision_, native_);
}

void CudaKernels::bias_act_forward(float* y, const float* bias, std::int64_t rows,
                                   std::int64_t cols, Activation act, float* pre) const {
  cuda::bias_act_forward(y, bias, rows, cols, act, pre, native_);
}

void CudaKernels::act_forward(const float* x, float* y, std::int64_t n, Activation act) const {
  cuda::act_forward(x, y, n, act, native_);
}

void CudaKernels::act_backward(const float* dy, const float* saved, float* dz, std::int64_t n,
                               Activation act) const {
  cuda::act_backward(dy, saved, dz, n, act, native_);
}

void CudaKernels::act_backward_bias(const float* dy, const float* saved, float* dz,
                                    std::int64_t rows, std::int64_t cols, Activation act, float* db,
                                    float alpha, float beta) const {
  cuda::act_backward_bias(dy, saved, dz, rows, cols, act, db, alpha, beta, native_);
}

void CudaKernels::column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha,
                             float beta, float* out) const {
  cuda::column_sum(x, rows, cols, alpha, beta, out, native_);
}

void CudaKernels::row_bias_act_forward(float* y, const float* bias, std::int64_t rows,
                                       std::int64_t cols, Activation act) const {
  cuda::row_bias_act_forward(y, bias, rows, cols, act, native_);
}

void CudaKernels::row_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha,
                          float beta, float* out) const {
  cuda::row_sum(x, rows, cols, alpha, beta, out, native_);
}

void CudaKernels::multiply(const float* a, const float* b, float alpha, float beta, float* out,
                           std::int64_t n) const {
  cuda::multiply(a, b, alpha, beta, out, n, native_);
}

void CudaKernels::exp(const float* x, float* y, std::int64_t n) const {
  cuda::exp(x, y, n, native_);
}

void CudaKernels::log(const float* x, float* y, std::int64_t n) const {
  cuda::log(x, y, n, native_);
}

void CudaKernels::fill(float* x, std::int64_t n, float value) const {
  cuda::fill(x, n, value, native_);
}

void CudaKernels::softmax_forward(const float* x, float* y, std::int64_t rows,
                                  std::int64_t cols) const {
  cuda::softmax_forward(x, y, rows, cols, false, native_);
}

void CudaKernels::softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows,
                                   std::int64_t cols) const {
  cuda::softmax_backward(y, dy, dx, rows, cols, false, native_);
}

void CudaKernels::row_max(const float* x, std::int64_t rows, std::int64_t cols, float* out) const {
  cuda::row_max(x, rows, cols, out, native_);
}

void CudaKernels::sum_squares(const float* x, std::int64_t n, float* out) const {
  cuda::sum_squares(x, n, out, native_);
}

void CudaKernels::layer_norm_forward(const float* x, const float* gamma, const float* beta,
                                     float* y, float* xhat, float* rstd, std::int64_t rows,
                                     std::int64_t cols, float eps) const {
  cuda::layer_norm_forward(x, gamma, beta, y, xhat, rstd, rows, cols, eps, native_);
}

void CudaKernels::layer_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                            const float* gamma, float* dx, std::int64_t rows,
                                            std::int64_t cols) const {
  cuda::layer_norm_backward_input(dy, xhat, rstd, gamma, dx, rows, cols, native_);
}

void CudaKernels::layer_norm_backward_weight(const float* dy, const float* xhat, float* dgamma,
                                             float* dbeta, std::int64_t rows, std::int64_t cols,
                                             float alpha, float beta) const {
  cuda::layer_norm_backward_weight(dy, xhat, dgamma, dbeta, rows, cols, alpha, beta, native_);
}

void CudaKernels::batch_norm_forward(const float* x, const float* gamma, const float* beta,
                                     float* y, float* xhat, float* rstd, float* sums,
                                     std::int64_t n, std::int64_t c, std::int64_t hw,
                                     float eps) const {
  cuda::batch_norm_forward(x, gamma, beta, y, xhat, rstd, sums, n, c, hw, eps, native_);
}

void CudaKernels::batch_norm_inference(const float* x, const float* gamma, const float* beta,
                                       const float* mean, const float* var, float* y,
                                       std::int64_t n, std::int64_t c, std::int64_t hw,
                                       float eps) const {
  cuda::batch_norm_inference(x, gamma, beta, mean, var, y, n, c, hw, eps, native_);
}

void CudaKernels::batch_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                            const float* gamma, float* dx, std::int64_t n,
                                            std::int64_t c, std::int64_t hw) const {
  cuda::batch_norm_backward_input(dy, xhat, rstd, gamma, dx, n, c, hw, native_);
}

void CudaKernels::batch_norm_backward_weight(const float* dy, const float* xhat, float* dgamma,
                                             float* dbeta, std::int64_t n, std::int64_t c,
                                             std::int64_t hw, float alpha, float beta) const {
  cuda::batch_norm_backward_weight(dy, xhat, dgamma, dbeta, n, c, hw, alpha, beta, native_);
}

void CudaKernels::batch_norm_update_running(const float* sum, const float* sum_sq,
                                            const float* count, const float* mean, const float* var,
                                            const float* updates, float* mean_out, float* var_out,
                                            float* updates_out, std::int64_t c,
                                            float momentum) const {
  cuda::batch_norm_update_running(sum, sum_sq, count, mean, var, updates, mean_out, var_out,
                                  updates_out, c, momentum, native_);
}

void CudaKernels::embedding_forward(const std::int32_t* ids, const float* table, const float* pos,
                                    float* y, std::int64_t batch, std::int64_t seq,
                                    std::int64_t vocab, std::int64_t dim) const {
  cuda::embedding_forward(ids, table, pos, y, batch, seq, vocab, dim, native_);
}

void CudaKernels::embedding_backward(const std::int32_t* ids, const float* dy, float* dtable,
                                     float* dpos, std::int64_t batch, std::int64_t seq,
                                     std::int64_t vocab, std::int64_t dim, float alpha,
                                     float beta) const {
  cuda::embedding_backward(ids, dy, dtable, dpos, batch, seq, vocab, dim, alpha, beta, native_);
}

void CudaKernels::dropout_apply(const float* x, float* y, std::int64_t samples,
                                std::int64_t per_sample, float p, std::uint64_t key,
                                std::int64_t first_sample) const {
  cuda::dropout_apply(x, y, samples, per_sample, p, key, first_sample, native_);
}

void CudaKernels::causal_attention_forward(const float* qkv, float* out, float* probs,
                                           std::int64_t batch, std::int64_t seq, std::int64_t heads,
                                           std::int64_t d_head) const {
  cuda::causal_attention_forward(qkv, out, probs, batch, seq, heads, d_head, precision_, native_);
}

void CudaKernels::causal_attention_backward(const float* qkv, const float* probs, const float* dout,
                                            float* dqkv, std::int64_t batch, std::int64_t seq,
                                            std::int64_t heads, std::int64_t d_head) const {
  const std::size_t bytes = cuda::causal_attention_scratch_bytes(seq, heads);
  Tensor scratch = empty({static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float))});
  cuda::causal_attention_backward(qkv, probs, dout, dqkv, batch, seq, heads, d_head,
                                  scratch.raw_data(), precision_, native_);
}

bool CudaKernels::fused_attention(std::int64_t d_head) const {
  return fused_attention_ && precision_ == cuda::GemmPrecision::bf16 &&
         cuda::flash_attention_supported(d_head);
}

void CudaKernels::fused_attention_forward(const float* qkv, float* out, float* lse,
                                          std::int64_t batch, std::int64_t seq, std::int64_t heads,
                                          std::int64_t d_head) const {
  cuda::flash_attention_forward(qkv, out, lse, batch, seq, heads, d_head, native_);
}

void CudaKernels::fused_attention_backward(const float* qkv, const float* out, const float* lse,
                                           const float* dout, float* dqkv, std::int64_t batch,
                                           std::int64_t seq, std::int64_t heads,
                                           std::int64_t d_head) const {
  const std::size_t bytes = cuda::flash_attention_scratch_bytes(batch, seq, heads);
  Tensor scratch = empty({static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float))});
  cuda::flash_attention_backward(qkv, out, lse, dout, dqkv, batch, seq, heads, d_head,
                                 scratch.raw_data(), native_);
}

void CudaKernels::cross_entropy_loss(const float* logits, const std::int32_t* targets,
                                     std::int64_t rows, std::int64_t classes, float* dlogits,
                                     float scale, CrossEntropySums* sums) const {
  const std::size_t bytes = cuda::cross_entropy_scratch_bytes(rows);
  Tensor scratch = empty(
      {std::max<std::int64_t>(1, static_cast<std::int64_t>((bytes + sizeof(float) - 1) / 4))});
  cuda::cross_entropy(logits, targets, rows, classes, dlogits, scale, sums, scratch.raw_data(),
                      native_);
}

void CudaKernels::pointwise_loss(PointwiseLoss loss, const float* x, const float* t, std::int64_t n,
                                 float* dx, float scale, CrossEntropySums* sums) const {
  const std::size_t bytes = cuda::pointwise_loss_scratch_bytes(n);
  Tensor scratch = empty(
      {std::max<std::int64_t>(1, static_cast<std::int64_t>((bytes + sizeof(float) - 1) / 4))});
  cuda::pointwise_loss(loss, x, t, n, dx, scale, sums, scratch.raw_data(), native_);
}

void CudaKernels::sum_losses(const float* values, std::int64_t n, CrossEntropySums* sums) const {
  cuda::sum_losses(values, n, sums, native_);
}

void CudaKernels::im2col(const float* x, const ConvGeometry& g, std::int64_t n, float* col) const {
  cuda::im2col(x, g, n, col, native_);
}

void CudaKernels::col2im(const float* col, const ConvGeometry& g, std::int64_t n, float* dx) const {
  cuda::col2im(col, g, n, dx, native_);
}

void CudaKernels::nchw_to_cm(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                             float* out) const {
  cuda::nchw_to_cm(x, n, c, hw, out, native_);
}

void CudaKernels::cm_to_nchw(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                             float* out) const {
  cuda::cm_to_nchw(x, n, c, hw, out, native_);
}

void CudaKernels::max_pool_forward(const float* x, const ConvGeometry& g, std::int64_t n, float* y,
                                   std::int32_t* argmax) const {
  cuda::max_pool_forward(x, g, n, y, argmax, native_);
}

void CudaKernels::max_pool_backward(const float* dy, const std::int32_t* argmax,
                                    const ConvGeometry& g, std::int64_t n, float* dx) const {
  cuda::max_pool_backward(dy, argmax, g, n, dx, native_);
}

void CudaKernels::sgd_update(const float* p, const float* g, float* buf, float* out, std::int64_t n,
                             double lr, double weight_decay, double momentum, bool nesterov,
                             bool first_step) const {
  cuda::sgd_update(p, g, buf, out, n, lr, weight_decay, momentum, nesterov, first_step, native_);
}

void CudaKernels::adamw_update(const float* p, const float* g, float* m, float* v, float* out,
                               std::int64_t n, double lr, double weight_decay, double beta1,
                               double beta2, double eps, std::int64_t t) const {
  cuda::adamw_update(p, g, m, v, out, n, lr, weight_decay, beta1, beta2, eps, t, native_);
}

}  // namespace tandem::models
