#pragma once
// Part of Tandem's public API (docs/embedding.md): the kernels of one device, as a layer sees
// them. A layer gets them from its LayerContext (tandem/layer.hpp) and computes through them
// only, so the same layer runs on every device a stage may use (cpu, cuda:N): Tandem hands it
// the kernels of the device its stage runs on, and every tensor it receives lives there.
//
// Conventions, checked on every call (a violation throws std::invalid_argument naming the
// kernel, the argument and the tensor):
//  - every tensor is defined, on device(), and f32 (copy: any dtype, the same on both sides);
//  - a tensor is read as a row-major matrix [rows, cols]: cols is its last dimension, rows the
//    product of the others (a rank-1 tensor [n] is [1, n]; a rank-0 tensor is [1, 1]);
//  - outputs are written, never resized: they must already have the size the kernel names.
// Calls are ordered: each sees the results of those before it. On cpu a call completes before
// it returns; on cuda it is queued on the stage's stream and returns at once, so results exist
// only on the device until Tandem has synchronised (never read them through Tensor::data<T>(),
// which throws for a device tensor, or copy them with Tensor's own members, which are not
// ordered with the queue). Allocate every tensor a layer returns or keeps through empty() or
// zeros(): those stay valid until the queued work that uses them has run.
#include <cstdint>

#include "device.hpp"
#include "dtype.hpp"
#include "tensor.hpp"

namespace tandem {

// Sigmoid and tanh are activations here rather than calls of their own: a gate or a bounded
// output is an activation like relu, so activation, activation_backward and the fused
// bias_activation(_backward) take them all, and layers::linear may end in any of them.
enum class Activation : std::uint8_t {
  none,     // identity
  relu,     // max(x, 0)
  gelu,     // x * Phi(x), the tanh approximation (as PyTorch's approximate="tanh")
  sigmoid,  // 1 / (1 + exp(-x))
  tanh,     // tanh(x)
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  // The CPU's kernels: what a layer called directly (a unit test, a tool) on cpu tensors gets,
  // and what a LayerContext without kernels stands for.
  static const Kernels& cpu();

  virtual Device device() const = 0;

  // --- memory on device() ---
  // Contents unspecified: the caller writes every element before reading any.
  virtual Tensor empty(const Shape& shape, DType dtype = DType::f32) const = 0;
  // f32 zeros.
  virtual Tensor zeros(const Shape& shape) const = 0;
  // dst = src, element for element; the same dtype and number of elements (shapes may differ),
  // not overlapping.
  virtual void copy(const Tensor& src, Tensor& dst) const = 0;

  // --- element-wise, over every element (the same number in each argument) ---
  // x = beta * x; beta = 0 writes zeros without reading x (which may hold NaN).
  virtual void scale(Tensor& x, float beta) const = 0;
  // out = a + b; out may be a or b.
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) const = 0;
  // y = act(x); y may be x.
  virtual void activation(Activation act, const Tensor& x, Tensor& y) const = 0;
  // dx = dy * act'(.), where `saved` is the activation's output for relu, sigmoid and tanh
  // (dy * y * (1 - y), dy * (1 - y^2)) and its input for gelu (none copies dy); dx may be dy.
  virtual void activation_backward(Activation act, const Tensor& dy, const Tensor& saved,
                                   Tensor& dx) const = 0;
  // out = a * b; out may be a or b. (Kernels of an application's own that override the form
  // below keep this one visible with `using Kernels::multiply;`.)
  void multiply(const Tensor& a, const Tensor& b, Tensor& out) const {
    multiply(a, b, 1.0f, 0.0f, out);
  }
  // out = alpha * a * b + beta * out (a product rule's accumulation in backward); beta = 0
  // writes out without reading it (which may hold NaN). out may be a or b.
  virtual void multiply(const Tensor& a, const Tensor& b, float alpha, float beta,
                        Tensor& out) const = 0;
  // y = exp(x); y may be x. Overflows to inf, underflows to 0.
  virtual void exp(const Tensor& x, Tensor& y) const = 0;
  // y = log(x), the natural logarithm (-inf at 0, NaN below); y may be x.
  virtual void log(const Tensor& x, Tensor& y) const = 0;
  // x = value, every element.
  virtual void fill(Tensor& x, float value) const = 0;

  // --- matrices ---
  // c = alpha * op(a) op(b) + beta * c, with op(x) = x^T when trans_x; op(a) is [m, k], op(b)
  // [k, n], c [m, n]. beta = 0 writes c without reading it; beta = 1 accumulates.
  virtual void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                    float beta, Tensor& c) const = 0;
  // In place over y [rows, cols]: y[r, c] = act(y[r, c] + bias[c]). bias has cols elements, or
  // is undefined (Tensor()) for none. For gelu, `pre` (y's size) receives the pre-activation
  // values that activation_backward needs; otherwise it may be null.
  virtual void bias_activation(Tensor& y, const Tensor& bias, Activation act,
                               Tensor* pre) const = 0;
  // activation_backward over dy [rows, cols] fused with the bias gradient:
  // dbias[c] = alpha * sum_r dz[r, c] + beta * dbias[c] (dbias null: none).
  virtual void bias_activation_backward(Activation act, const Tensor& dy, const Tensor& saved,
                                        Tensor& dz, Tensor* dbias, float alpha,
                                        float beta) const = 0;

  // --- rows of x [rows, cols] ---
  // y[r, :] = softmax(x[r, :]) = exp(x[r, :] - max) / sum_c exp(x[r, c] - max), so no row
  // overflows; y has x's size and may be x.
  virtual void softmax(const Tensor& x, Tensor& y) const = 0;
  // From the forward's output y: dx[r, :] = y[r, :] * (dy[r, :] - sum_c dy[r, c] * y[r, c]);
  // dy, y and dx have one size; dx may be dy.
  virtual void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) const = 0;

  // --- reductions over x [rows, cols] ---
  // out[c] = alpha * sum_r x[r, c] + beta * out[c]; out has cols elements.
  virtual void column_sum(const Tensor& x, float alpha, float beta, Tensor& out) const = 0;
  // out[r] = alpha * sum_c x[r, c] + beta * out[r]; out has rows elements.
  virtual void row_sum(const Tensor& x, float alpha, float beta, Tensor& out) const = 0;
  // out[r] = alpha * mean_c x[r, c] + beta * out[r]; out has rows elements; x has cols > 0 (or
  // no rows).
  virtual void row_mean(const Tensor& x, float alpha, float beta, Tensor& out) const = 0;
  // out[r] = max_c x[r, c]; out has rows elements; x has cols > 0 (or no rows).
  virtual void row_max(const Tensor& x, Tensor& out) const = 0;
};

}  // namespace tandem
