#pragma once
// The public tandem::Kernels (include/tandem/kernels.hpp) over the models' Kernels of one
// device: checks each call's tensors (defined, on the device, f32, sizes that fit) and forwards
// it with raw pointers, so a custom layer gets the same kernels as the built-in ones, on cpu and
// on cuda alike.
#include <cstdint>
#include <utility>

#include "models/kernels/kernels.hpp"
#include "tandem/kernels.hpp"

namespace tandem::api {

class DeviceKernels final : public tandem::Kernels {
 public:
  explicit DeviceKernels(const models::Kernels& impl) : impl_(impl) {}

  const models::Kernels& impl() const { return impl_; }

  Device device() const override { return impl_.device(); }
  Tensor empty(const Shape& shape, DType dtype) const override;
  Tensor zeros(const Shape& shape) const override;
  void copy(const Tensor& src, Tensor& dst) const override;
  void scale(Tensor& x, float beta) const override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) const override;
  void activation(Activation act, const Tensor& x, Tensor& y) const override;
  void activation_backward(Activation act, const Tensor& dy, const Tensor& saved,
                           Tensor& dx) const override;
  using tandem::Kernels::multiply;
  void multiply(const Tensor& a, const Tensor& b, float alpha, float beta,
                Tensor& out) const override;
  void exp(const Tensor& x, Tensor& y) const override;
  void log(const Tensor& x, Tensor& y) const override;
  void fill(Tensor& x, float value) const override;
  void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
            Tensor& c) const override;
  void bias_activation(Tensor& y, const Tensor& bias, Activation act, Tensor* pre) const override;
  void bias_activation_backward(Activation act, const Tensor& dy, const Tensor& saved, Tensor& dz,
                                Tensor* dbias, float alpha, float beta) const override;
  void column_sum(const Tensor& x, float alpha, float beta, Tensor& out) const override;
  void softmax(const Tensor& x, Tensor& y) const override;
  void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) const override;
  void row_sum(const Tensor& x, float alpha, float beta, Tensor& out) const override;
  void row_mean(const Tensor& x, float alpha, float beta, Tensor& out) const override;
  void row_max(const Tensor& x, Tensor& out) const override;

 private:
  // Throws std::invalid_argument unless t is defined, on device() and of `dtype`.
  void check(const char* kernel, const char* arg, const Tensor& t, DType dtype = DType::f32) const;
  // check() of x and y, and y of x's number of elements: the element-wise maps y = f(x).
  void check_map(const char* kernel, const Tensor& x, const Tensor& y) const;
  // check() of x and out, out of x's rows; returns x's rows and cols.
  std::pair<std::int64_t, std::int64_t> check_per_row(const char* kernel, const Tensor& x,
                                                      const Tensor& out) const;

  const models::Kernels& impl_;
};

// The models' Kernels behind `k`; throws std::invalid_argument when k is not Tandem's own (an
// application's Kernels cannot run the built-in layers).
const models::Kernels& models_kernels(const tandem::Kernels& k);

models::Activation to_models(Activation act);

}  // namespace tandem::api
