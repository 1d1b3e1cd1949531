#include "api/device_kernels.hpp"

#include <stdexcept>
#include <string>

namespace tandem::api {
namespace {

// A tensor read as a row-major matrix: cols its last dimension, rows the product of the others.
struct Matrix {
  std::int64_t rows = 1;
  std::int64_t cols = 1;
};

Matrix matrix(const Tensor& t) {
  Matrix m;
  if (t.rank() == 0) return m;
  m.cols = t.dim(-1);
  for (int i = 0; i + 1 < t.rank(); ++i) m.rows *= t.dim(i);
  return m;
}

std::string dims(std::int64_t a, std::int64_t b) {
  return shape_str({a, b});
}

[[noreturn]] void refuse(const char* kernel, const std::string& what) {
  throw std::invalid_argument(std::string("Kernels::") + kernel + ": " + what);
}

void same_numel(const char* kernel, const char* arg, const Tensor& t, std::int64_t want) {
  if (t.numel() != want) {
    refuse(kernel, std::string(arg) + " is " + t.describe() + ", wants " + std::to_string(want) +
                       " elements");
  }
}

float* out_ptr(Tensor& t) {
  return static_cast<float*>(t.raw_data());
}

const float* in_ptr(const Tensor& t) {
  return static_cast<const float*>(t.raw_data());
}

}  // namespace

models::Activation to_models(Activation act) {
  switch (act) {
    case Activation::relu:
      return models::Activation::relu;
    case Activation::gelu:
      return models::Activation::gelu;
    case Activation::sigmoid:
      return models::Activation::sigmoid;
    case Activation::tanh:
      return models::Activation::tanh;
    case Activation::none:
      break;
  }
  return models::Activation::none;
}

const models::Kernels& models_kernels(const tandem::Kernels& k) {
  const auto* own = dynamic_cast<const DeviceKernels*>(&k);
  if (own == nullptr) {
    throw std::invalid_argument("built-in layers run only on Tandem's kernels (a LayerContext " +
                                std::string("whose kernels are ctx.k() of a Tandem call or ") +
                                "Kernels::cpu()), not on kernels for " + k.device().str() +
                                " of the application's own");
  }
  return own->impl();
}

void DeviceKernels::check(const char* kernel, const char* arg, const Tensor& t, DType dtype) const {
  if (!t.defined()) refuse(kernel, std::string(arg) + " is undefined");
  if (t.device() != device()) {
    refuse(kernel,
           std::string(arg) + " is " + t.describe() + ", the kernels run on " + device().str());
  }
  if (t.dtype() != dtype) {
    refuse(kernel,
           std::string(arg) + " is " + t.describe() + ", wants " + std::string(dtype_name(dtype)));
  }
}

Tensor DeviceKernels::empty(const Shape& shape, DType dtype) const {
  return impl_.empty(shape, dtype);
}

Tensor DeviceKernels::zeros(const Shape& shape) const {
  Tensor t = impl_.empty(shape, DType::f32);
  if (t.numel() > 0) impl_.scale(out_ptr(t), t.numel(), 0.0f);
  return t;
}

void DeviceKernels::copy(const Tensor& src, Tensor& dst) const {
  check("copy", "src", src, src.dtype());
  check("copy", "dst", dst, src.dtype());
  same_numel("copy", "dst", dst, src.numel());
  if (src.numel() > 0) impl_.copy_bytes(src.raw_data(), dst.raw_data(), src.nbytes());
}

void DeviceKernels::scale(Tensor& x, float beta) const {
  check("scale", "x", x);
  if (x.numel() > 0) impl_.scale(out_ptr(x), x.numel(), beta);
}

void DeviceKernels::add(const Tensor& a, const Tensor& b, Tensor& out) const {
  check("add", "a", a);
  check("add", "b", b);
  check("add", "out", out);
  same_numel("add", "b", b, a.numel());
  same_numel("add", "out", out, a.numel());
  if (a.numel() > 0) impl_.add(in_ptr(a), in_ptr(b), out_ptr(out), a.numel());
}

void DeviceKernels::activation(Activation act, const Tensor& x, Tensor& y) const {
  check("activation", "x", x);
  check("activation", "y", y);
  same_numel("activation", "y", y, x.numel());
  if (x.numel() > 0) impl_.act_forward(in_ptr(x), out_ptr(y), x.numel(), to_models(act));
}

void DeviceKernels::activation_backward(Activation act, const Tensor& dy, const Tensor& saved,
                                        Tensor& dx) const {
  check("activation_backward", "dy", dy);
  check("activation_backward", "dx", dx);
  same_numel("activation_backward", "dx", dx, dy.numel());
  const float* s = nullptr;
  if (act != Activation::none) {
    check("activation_backward", "saved", saved);
    same_numel("activation_backward", "saved", saved, dy.numel());
    s = in_ptr(saved);
  }
  if (dy.numel() > 0) impl_.act_backward(in_ptr(dy), s, out_ptr(dx), dy.numel(), to_models(act));
}

void DeviceKernels::check_map(const char* kernel, const Tensor& x, const Tensor& y) const {
  check(kernel, "x", x);
  check(kernel, "y", y);
  same_numel(kernel, "y", y, x.numel());
}

void DeviceKernels::multiply(const Tensor& a, const Tensor& b, float alpha, float beta,
                             Tensor& out) const {
  check("multiply", "a", a);
  check("multiply", "b", b);
  check("multiply", "out", out);
  same_numel("multiply", "b", b, a.numel());
  same_numel("multiply", "out", out, a.numel());
  if (a.numel() > 0) impl_.multiply(in_ptr(a), in_ptr(b), alpha, beta, out_ptr(out), a.numel());
}

void DeviceKernels::exp(const Tensor& x, Tensor& y) const {
  check_map("exp", x, y);
  if (x.numel() > 0) impl_.exp(in_ptr(x), out_ptr(y), x.numel());
}

void DeviceKernels::log(const Tensor& x, Tensor& y) const {
  check_map("log", x, y);
  if (x.numel() > 0) impl_.log(in_ptr(x), out_ptr(y), x.numel());
}

void DeviceKernels::fill(Tensor& x, float value) const {
  check("fill", "x", x);
  if (x.numel() > 0) impl_.fill(out_ptr(x), x.numel(), value);
}

void DeviceKernels::gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                         float beta, Tensor& c) const {
  check("gemm", "a", a);
  check("gemm", "b", b);
  check("gemm", "c", c);
  const Matrix am = matrix(a), bm = matrix(b), cm = matrix(c);
  const std::int64_t m = trans_a ? am.cols : am.rows, k = trans_a ? am.rows : am.cols;
  const std::int64_t kb = trans_b ? bm.cols : bm.rows, n = trans_b ? bm.rows : bm.cols;
  if (k != kb) {
    refuse("gemm", "op(a) is " + dims(m, k) + " (a " + a.describe() + "), op(b) is " + dims(kb, n) +
                       " (b " + b.describe() + "): inner dimensions differ");
  }
  if (cm.rows != m || cm.cols != n) {
    refuse("gemm", "c is " + c.describe() + ", wants " + dims(m, n) + " as a matrix");
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: c = beta * c
    impl_.scale(out_ptr(c), c.numel(), beta);
    return;
  }
  impl_.gemm(trans_a, trans_b, m, n, k, alpha, in_ptr(a), am.cols, in_ptr(b), bm.cols, beta,
             out_ptr(c), n);
}

void DeviceKernels::bias_activation(Tensor& y, const Tensor& bias, Activation act,
                                    Tensor* pre) const {
  check("bias_activation", "y", y);
  const Matrix ym = matrix(y);
  const float* bp = nullptr;
  if (bias.defined()) {
    check("bias_activation", "bias", bias);
    same_numel("bias_activation", "bias", bias, ym.cols);
    bp = in_ptr(bias);
  }
  float* pp = nullptr;
  if (pre != nullptr) {
    check("bias_activation", "pre", *pre);
    same_numel("bias_activation", "pre", *pre, y.numel());
    pp = out_ptr(*pre);
  } else if (act == Activation::gelu) {
    refuse("bias_activation", "gelu needs `pre` (the pre-activation its backward reads)");
  }
  if (y.numel() > 0) impl_.bias_act_forward(out_ptr(y), bp, ym.rows, ym.cols, to_models(act), pp);
}

void DeviceKernels::bias_activation_backward(Activation act, const Tensor& dy, const Tensor& saved,
                                             Tensor& dz, Tensor* dbias, float alpha,
                                             float beta) const {
  check("bias_activation_backward", "dy", dy);
  check("bias_activation_backward", "dz", dz);
  same_numel("bias_activation_backward", "dz", dz, dy.numel());
  const Matrix dm = matrix(dy);
  const float* s = nullptr;
  if (act != Activation::none) {
    check("bias_activation_backward", "saved", saved);
    same_numel("bias_activation_backward", "saved", saved, dy.numel());
    s = in_ptr(saved);
  }
  float* db = nullptr;
  if (dbias != nullptr) {
    check("bias_activation_backward", "dbias", *dbias);
    same_numel("bias_activation_backward", "dbias", *dbias, dm.cols);
    db = out_ptr(*dbias);
  }
  if (dy.numel() == 0) {
    if (db != nullptr && dm.cols > 0) impl_.scale(db, dm.cols, beta);
    return;
  }
  impl_.act_backward_bias(in_ptr(dy), s, out_ptr(dz), dm.rows, dm.cols, to_models(act), db, alpha,
                          beta);
}

void DeviceKernels::softmax(const Tensor& x, Tensor& y) const {
  check_map("softmax", x, y);
  const Matrix xm = matrix(x);
  if (x.numel() > 0) impl_.softmax_forward(in_ptr(x), out_ptr(y), xm.rows, xm.cols);
}

void DeviceKernels::softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) const {
  check("softmax_backward", "dy", dy);
  check("softmax_backward", "y", y);
  check("softmax_backward", "dx", dx);
  same_numel("softmax_backward", "y", y, dy.numel());
  same_numel("softmax_backward", "dx", dx, dy.numel());
  const Matrix ym = matrix(y);
  if (dy.numel() > 0) {
    impl_.softmax_backward(in_ptr(y), in_ptr(dy), out_ptr(dx), ym.rows, ym.cols);
  }
}

void DeviceKernels::column_sum(const Tensor& x, float alpha, float beta, Tensor& out) const {
  check("column_sum", "x", x);
  check("column_sum", "out", out);
  const Matrix xm = matrix(x);
  same_numel("column_sum", "out", out, xm.cols);
  if (xm.cols == 0) return;
  if (xm.rows == 0) {
    impl_.scale(out_ptr(out), xm.cols, beta);
    return;
  }
  impl_.column_sum(in_ptr(x), xm.rows, xm.cols, alpha, beta, out_ptr(out));
}

void DeviceKernels::row_sum(const Tensor& x, float alpha, float beta, Tensor& out) const {
  check("row_sum", "x", x);
  check("row_sum", "out", out);
  const Matrix xm = matrix(x);
  same_numel("row_sum", "out", out, xm.rows);
  if (xm.rows == 0) return;
  if (xm.cols == 0) {
    impl_.scale(out_ptr(out), xm.rows, beta);
    return;
  }
  impl_.row_sum(in_ptr(x), xm.rows, xm.cols, alpha, beta, out_ptr(out));
}

std::pair<std::int64_t, std::int64_t> DeviceKernels::check_per_row(const char* kernel,
                                                                   const Tensor& x,
                                                                   const Tensor& out) const {
  check(kernel, "x", x);
  check(kernel, "out", out);
  const Matrix xm = matrix(x);
  same_numel(kernel, "out", out, xm.rows);
  if (xm.rows > 0 && xm.cols == 0) {
    refuse(kernel, "x is " + x.describe() + ", wants at least one column");
  }
  return {xm.rows, xm.cols};
}

void DeviceKernels::row_mean(const Tensor& x, float alpha, float beta, Tensor& out) const {
  const auto [rows, cols] = check_per_row("row_mean", x, out);
  if (rows == 0) return;
  impl_.row_sum(in_ptr(x), rows, cols, alpha / static_cast<float>(cols), beta, out_ptr(out));
}

void DeviceKernels::row_max(const Tensor& x, Tensor& out) const {
  const auto [rows, cols] = check_per_row("row_max", x, out);
  if (rows > 0) impl_.row_max(in_ptr(x), rows, cols, out_ptr(out));
}

}  // namespace tandem::api

namespace tandem {

const Kernels& Kernels::cpu() {
  static const api::DeviceKernels kernels(models::cpu_kernels());
  return kernels;
}

}  // namespace tandem
