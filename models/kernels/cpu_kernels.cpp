// The CPU's Kernels: the cpu:: kernels behind the device-neutral interface, plus the few
// element-wise loops that used to live inline in the layers. Those loops are kept exactly as
// the layers had them (same expressions, same chunking), so moving them behind the seam did
// not change a single bit of any result.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/kernels/cpu/attention.hpp"
#include "models/kernels/cpu/batch_norm.hpp"
#include "models/kernels/cpu/bf16_convert.hpp"
#include "models/kernels/cpu/bf16_gemm.hpp"
#include "models/kernels/cpu/bf16_weight_cache.hpp"
#include "models/kernels/cpu/conv.hpp"
#include "models/kernels/cpu/dropout.hpp"
#include "models/kernels/cpu/elementwise.hpp"
#include "models/kernels/cpu/embedding.hpp"
#include "models/kernels/cpu/gemm.hpp"
#include "models/kernels/cpu/layer_norm.hpp"
#include "models/kernels/cpu/reduce.hpp"
#include "models/kernels/cpu/softmax.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/kernels.hpp"

namespace tandem::models {
namespace {

// Rows per task for loops over the rows of a [rows, cols] matrix: about kElementGrain
// elements each, so that short rows are not one task apiece.
std::int64_t row_grain(std::int64_t cols) {
  return std::max<std::int64_t>(1, cpu::kElementGrain / std::max<std::int64_t>(1, cols));
}

// Operands rounded to bf16 on the fly, in a buffer per thread that grows to the largest seen.
// A nested call on the same thread (a parallel loop's worker picking up another product while
// it waits) gets a buffer of its own instead.
class Bf16Scratch {
 public:
  explicit Bf16Scratch(std::size_t n) {
    if (in_use_) {
      own_.resize(n);
      data_ = own_.data();
      return;
    }
    if (shared_.size() < n) shared_.resize(n);
    in_use_ = true;
    held_ = true;
    data_ = shared_.data();
  }
  ~Bf16Scratch() {
    if (held_) in_use_ = false;
  }
  Bf16Scratch(const Bf16Scratch&) = delete;
  Bf16Scratch& operator=(const Bf16Scratch&) = delete;
  BFloat16* data() const { return data_; }

 private:
  static thread_local std::vector<BFloat16> shared_;
  static thread_local bool in_use_;
  std::vector<BFloat16> own_;
  BFloat16* data_ = nullptr;
  bool held_ = false;
};
thread_local std::vector<BFloat16> Bf16Scratch::shared_;
thread_local bool Bf16Scratch::in_use_ = false;

class CpuKernels final : public Kernels {
 public:
  explicit CpuKernels(bool bf16_products = false) : bf16_products_(bf16_products) {}

  Device device() const override { return Device::cpu(); }

  bool bf16_products() const override { return bf16_products_; }
  Tensor bf16_copy(const Tensor& w) const override { return weights_bf16_.get(w); }
  void drop_bf16_copy(const Tensor& w) const override { weights_bf16_.drop(w); }
  void to_bf16(const float* x, BFloat16* y, std::int64_t n) const override {
    cpu::to_bf16(x, y, n);
  }
  void round_to_bf16(const float* x, float* y, std::int64_t n) const override {
    cpu::round_to_bf16(x, y, n);
  }
  void gemm_bf16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 float alpha, const float* a, std::int64_t lda, const BFloat16* b, std::int64_t ldb,
                 float beta, float* c, std::int64_t ldc) const override {
    // A packed as stored ([m, k], or [k, m] when transposed), without its padding.
    const std::int64_t rows = trans_a ? k : m, cols = trans_a ? m : k;
    const Bf16Scratch a16(static_cast<std::size_t>(std::max<std::int64_t>(0, rows * cols)));
    cpu::to_bf16_rows(a, lda, a16.data(), cols, rows, cols);
    cpu::bf16_gemm(trans_a, trans_b, m, n, k, alpha, a16.data(), cols, b, ldb, beta, c, ldc);
  }

  void gemm_bf16_ab(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                    float alpha, const BFloat16* a, std::int64_t lda, const BFloat16* b,
                    std::int64_t ldb, float beta, float* c, std::int64_t ldc) const override {
    cpu::bf16_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  Tensor empty(const Shape& shape, DType dtype) const override {
    return Tensor::empty(shape, dtype, Device::cpu());
  }

  Tensor to_f32(const Tensor& t) const override {
    if (!t.device().is_cpu()) {
      throw std::invalid_argument("cpu kernels: to_f32 of a tensor on another device: " +
                                  t.describe());
    }
    return t.to(DType::f32);
  }

  void copy_bytes(const void* src, void* dst, std::size_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void f32_to_i32(const float* x, std::int32_t* y, std::int64_t n) const override {
    cpu::parallel_for(n, cpu::kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) y[i] = static_cast<std::int32_t>(x[i]);
    });
  }
  void copy(const float* src, float* dst, std::int64_t n) const override {
    cpu::parallel_for(n, cpu::kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
      std::memcpy(dst + i0, src + i0, static_cast<std::size_t>(i1 - i0) * sizeof(float));
    });
  }

  void scale(float* x, std::int64_t n, float beta) const override {
    cpu::parallel_for(n, cpu::kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) x[i] = beta == 0.0f ? 0.0f : beta * x[i];
    });
  }

  void add(const float* a, const float* b, float* dst, std::int64_t n) const override {
    cpu::parallel_for(n, cpu::kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) dst[i] = a[i] + b[i];
    });
  }

  void copy_2d(const float* src, std::int64_t src_ld, float* dst, std::int64_t dst_ld,
               std::int64_t rows, std::int64_t cols) const override {
    const std::int64_t grain =
        std::max<std::int64_t>(1, cpu::kElementGrain / std::max<std::int64_t>(1, cols));
    cpu::parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        std::copy_n(src + r * src_ld, cols, dst + r * dst_ld);
      }
    });
  }

  void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
            const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
            float* c, std::int64_t ldc) const override {
    cpu::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  void bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                        Activation act, float* pre) const override {
    cpu::bias_act_forward(y, bias, rows, cols, act, pre);
  }
  void act_forward(const float* x, float* y, std::int64_t n, Activation act) const override {
    cpu::act_forward(x, y, n, act);
  }
  void act_backward(const float* dy, const float* saved, float* dz, std::int64_t n,
                    Activation act) const override {
    cpu::act_backward(dy, saved, dz, n, act);
  }
  void act_backward_bias(const float* dy, const float* saved, float* dz, std::int64_t rows,
                         std::int64_t cols, Activation act, float* db, float alpha,
                         float beta) const override {
    cpu::act_backward_bias(dy, saved, dz, rows, cols, act, db, alpha, beta);
  }
  void column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
                  float* out) const override {
    cpu::column_sum(x, rows, cols, alpha, beta, out);
  }

  void row_bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                            Activation act) const override {
    if (act != Activation::none && act != Activation::relu) {
      throw std::invalid_argument("row_bias_act_forward: activation must be none or relu");
    }
    cpu::parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        float* row = y + r * cols;
        const float br = bias[r];
        if (act == Activation::relu) {
          for (std::int64_t i = 0; i < cols; ++i) row[i] = std::max(row[i] + br, 0.0f);
        } else {
          for (std::int64_t i = 0; i < cols; ++i) row[i] += br;
        }
      }
    });
  }

  // A plain sequential sum per row (not lane_sum): the order convolution bias gradients have
  // always used, so checkpoints and reference runs stay reproducible.
  void row_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
               float* out) const override {
    cpu::parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const float* row = x + r * cols;
        float sum = 0.0f;
        for (std::int64_t i = 0; i < cols; ++i) sum += row[i];
        out[r] = beta == 0.0f ? alpha * sum : alpha * sum + beta * out[r];
      }
    });
  }

  void multiply(const float* a, const float* b, float alpha, float beta, float* out,
                std::int64_t n) const override {
    cpu::multiply(a, b, alpha, beta, out, n);
  }
  void exp(const float* x, float* y, std::int64_t n) const override { cpu::exp(x, y, n); }
  void log(const float* x, float* y, std::int64_t n) const override { cpu::log(x, y, n); }
  void fill(float* x, std::int64_t n, float value) const override { cpu::fill(x, n, value); }
  void softmax_forward(const float* x, float* y, std::int64_t rows,
                       std::int64_t cols) const override {
    cpu::softmax_forward(x, y, rows, cols);
  }
  void softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows,
                        std::int64_t cols) const override {
    cpu::softmax_backward(y, dy, dx, rows, cols);
  }
  void row_max(const float* x, std::int64_t rows, std::int64_t cols, float* out) const override {
    cpu::row_max(x, rows, cols, out);
  }
  void sum_squares(const float* x, std::int64_t n, float* out) const override {
    *out = cpu::sum_squares(x, n);
  }

  void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                          float* xhat, float* rstd, std::int64_t rows, std::int64_t cols,
                          float eps) const override {
    cpu::layer_norm_forward(x, gamma, beta, y, xhat, rstd, rows, cols, eps);
  }
  void layer_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                 const float* gamma, float* dx, std::int64_t rows,
                                 std::int64_t cols) const override {
    cpu::layer_norm_backward_input(dy, xhat, rstd, gamma, dx, rows, cols);
  }
  void layer_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                  std::int64_t rows, std::int64_t cols, float alpha,
                                  float beta) const override {
    cpu::layer_norm_backward_weight(dy, xhat, dgamma, dbeta, rows, cols, alpha, beta);
  }
  void batch_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                          float* xhat, float* rstd, float* sums, std::int64_t n, std::int64_t c,
                          std::int64_t hw, float eps) const override {
    cpu::batch_norm_forward(x, gamma, beta, y, xhat, rstd, sums, n, c, hw, eps);
  }
  void batch_norm_inference(const float* x, const float* gamma, const float* beta,
                            const float* mean, const float* var, float* y, std::int64_t n,
                            std::int64_t c, std::int64_t hw, float eps) const override {
    cpu::batch_norm_inference(x, gamma, beta, mean, var, y, n, c, hw, eps);
  }
  void batch_norm_backward_input(const float* dy, const float* xhat, const float* rstd,
                                 const float* gamma, float* dx, std::int64_t n, std::int64_t c,
                                 std::int64_t hw) const override {
    cpu::batch_norm_backward_input(dy, xhat, rstd, gamma, dx, n, c, hw);
  }
  void batch_norm_backward_weight(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                  std::int64_t n, std::int64_t c, std::int64_t hw, float alpha,
                                  float beta) const override {
    cpu::batch_norm_backward_weight(dy, xhat, dgamma, dbeta, n, c, hw, alpha, beta);
  }
  void batch_norm_update_running(const float* sum, const float* sum_sq, const float* count,
                                 const float* mean, const float* var, const float* updates,
                                 float* mean_out, float* var_out, float* updates_out,
                                 std::int64_t c, float momentum) const override {
    cpu::batch_norm_update_running(sum, sum_sq, count, mean, var, updates, mean_out, var_out,
                                   updates_out, c, momentum);
  }
  void embedding_forward(const std::int32_t* ids, const float* table, const float* pos, float* y,
                         std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                         std::int64_t dim) const override {
    cpu::embedding_forward(ids, table, pos, y, batch, seq, vocab, dim);
  }
  void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable, float* dpos,
                          std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                          std::int64_t dim, float alpha, float beta) const override {
    cpu::embedding_backward(ids, dy, dtable, dpos, batch, seq, vocab, dim, alpha, beta);
  }
  void dropout_apply(const float* x, float* y, std::int64_t samples, std::int64_t per_sample,
                     float p, std::uint64_t key, std::int64_t first_sample) const override {
    cpu::dropout_apply(x, y, samples, per_sample, p, key, first_sample);
  }
  void causal_attention_forward(const float* qkv, float* out, float* probs, std::int64_t batch,
                                std::int64_t seq, std::int64_t heads,
                                std::int64_t d_head) const override {
    cpu::causal_attention_forward(qkv, out, probs, batch, seq, heads, d_head);
  }
  void causal_attention_backward(const float* qkv, const float* probs, const float* dout,
                                 float* dqkv, std::int64_t batch, std::int64_t seq,
                                 std::int64_t heads, std::int64_t d_head) const override {
    cpu::causal_attention_backward(qkv, probs, dout, dqkv, batch, seq, heads, d_head);
  }

  void im2col(const float* x, const ConvGeometry& g, std::int64_t n, float* col) const override {
    cpu::im2col(x, g, n, col);
  }
  void col2im(const float* col, const ConvGeometry& g, std::int64_t n, float* dx) const override {
    cpu::col2im(col, g, n, dx);
  }
  void nchw_to_cm(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                  float* out) const override {
    cpu::nchw_to_cm(x, n, c, hw, out);
  }
  void cm_to_nchw(const float* x, std::int64_t n, std::int64_t c, std::int64_t hw,
                  float* out) const override {
    cpu::cm_to_nchw(x, n, c, hw, out);
  }
  void max_pool_forward(const float* x, const ConvGeometry& g, std::int64_t n, float* y,
                        std::int32_t* argmax) const override {
    cpu::max_pool_forward(x, g, n, y, argmax);
  }
  void max_pool_backward(const float* dy, const std::int32_t* argmax, const ConvGeometry& g,
                         std::int64_t n, float* dx) const override {
    cpu::max_pool_backward(dy, argmax, g, n, dx);
  }

  void sgd_update(const float* p, const float* g, float* buf, float* out, std::int64_t n,
                  double lr_d, double weight_decay, double momentum, bool nesterov,
                  bool first) const override {
    const auto lr = static_cast<float>(lr_d);
    const auto wd = static_cast<float>(weight_decay);
    const auto mom = static_cast<float>(momentum);
    if (mom == 0.0f) {
      cpu::parallel_for(n, cpu::kElementGrain, [&](std::int64_t k0, std::int64_t k1) {
        for (std::int64_t k = k0; k < k1; ++k) out[k] = p[k] - lr * (g[k] + wd * p[k]);
      });
      return;
    }
    cpu::parallel_for(n, cpu::kElementGrain, [&](std::int64_t k0, std::int64_t k1) {
      for (std::int64_t k = k0; k < k1; ++k) {
        const float d = g[k] + wd * p[k];
        const float b = first ? d : mom * buf[k] + d;
        buf[k] = b;
        out[k] = p[k] - lr * (nesterov ? d + mom * b : b);
      }
    });
  }

  void adamw_update(const float* p, const float* g, float* m, float* v, float* out, std::int64_t n,
                    double lr, double weight_decay, double beta1, double beta2, double eps_d,
                    std::int64_t t) const override {
    const auto td = static_cast<double>(t);
    const double bc1 = 1.0 - std::pow(beta1, td);
    const double bc2 = 1.0 - std::pow(beta2, td);
    const auto decay = static_cast<float>(1.0 - lr * weight_decay);
    const auto step_size = static_cast<float>(lr / bc1);
    const auto inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    const auto b1 = static_cast<float>(beta1);
    const auto b2 = static_cast<float>(beta2);
    const auto eps = static_cast<float>(eps_d);
    cpu::parallel_for(n, cpu::kElementGrain, [&](std::int64_t k0, std::int64_t k1) {
      for (std::int64_t k = k0; k < k1; ++k) {
        m[k] = b1 * m[k] + (1.0f - b1) * g[k];
        v[k] = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
        const float denom = std::sqrt(v[k]) * inv_sqrt_bc2 + eps;
        out[k] = p[k] * decay - step_size * m[k] / denom;
      }
    });
  }

 private:
  bool bf16_products_;
  mutable cpu::Bf16WeightCache weights_bf16_;
};

}  // namespace

const Kernels& cpu_kernels() {
  static const CpuKernels kernels;
  return kernels;
}

std::unique_ptr<Kernels> make_cpu_kernels(bool bf16_products) {
  return std::make_unique<CpuKernels>(bf16_products);
}

}  // namespace tandem::models
