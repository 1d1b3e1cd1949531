#include "models/detail/linear_ops.hpp"

namespace tandem::models::detail {

void linear_forward(const Kernels& k, const float* x, std::int64_t rows, std::int64_t in,
                    const float* w, const float* b, std::int64_t out, Activation act, float* y,
                    float* pre) {
  k.gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  k.bias_act_forward(y, b, rows, out, act, pre);
}

void linear_backward_input(const Kernels& k, const float* dz, std::int64_t rows, std::int64_t in,
                           const float* w, std::int64_t out, float* dx) {
  k.gemm(false, false, rows, in, out, 1.0f, dz, out, w, in, 0.0f, dx, in);
}

void linear_backward_weight(const Kernels& k, const float* dz, const float* x, std::int64_t rows,
                            std::int64_t in, std::int64_t out, float alpha, float beta, float* dw) {
  k.gemm(true, false, out, in, rows, alpha, dz, out, x, in, beta, dw, in);
}

void linear_forward_bf16(const Kernels& k, const BFloat16* x16, std::int64_t rows, std::int64_t in,
                         const BFloat16* w16, const float* b, std::int64_t out, Activation act,
                         float* y, float* pre) {
  k.gemm_bf16_ab(false, true, rows, out, in, 1.0f, x16, in, w16, in, 0.0f, y, out);
  k.bias_act_forward(y, b, rows, out, act, pre);
}

void linear_backward_input_bf16(const Kernels& k, const BFloat16* dz16, std::int64_t rows,
                                std::int64_t in, const BFloat16* w16, std::int64_t out, float* dx) {
  k.gemm_bf16_ab(false, false, rows, in, out, 1.0f, dz16, out, w16, in, 0.0f, dx, in);
}

void linear_backward_weight_bf16(const Kernels& k, const BFloat16* dz16, const BFloat16* x16,
                                 std::int64_t rows, std::int64_t in, std::int64_t out, float alpha,
                                 float beta, float* dw) {
  k.gemm_bf16_ab(true, false, out, in, rows, alpha, dz16, out, x16, in, beta, dw, in);
}

namespace {

const BFloat16* bf16_data(const Tensor& t) {
  return static_cast<const BFloat16*>(t.raw_data());
}

}  // namespace

void linear_map_forward(const Kernels& k, const float* x, std::int64_t rows, std::int64_t in,
                        const Tensor& w, const float* b, std::int64_t out, Activation act, float* y,
                        float* pre) {
  if (!k.bf16_products()) {
    linear_forward(k, x, rows, in, static_cast<const float*>(w.raw_data()), b, out, act, y, pre);
    return;
  }
  const Tensor w16 = k.bf16_copy(w);
  k.gemm_bf16(false, true, rows, out, in, 1.0f, x, in, bf16_data(w16), in, 0.0f, y, out);
  k.bias_act_forward(y, b, rows, out, act, pre);
}

void linear_map_backward_input(const Kernels& k, const float* dz, std::int64_t rows,
                               std::int64_t in, const Tensor& w, std::int64_t out, float* dx) {
  if (!k.bf16_products()) {
    linear_backward_input(k, dz, rows, in, static_cast<const float*>(w.raw_data()), out, dx);
    return;
  }
  const Tensor w16 = k.bf16_copy(w);
  k.gemm_bf16(false, false, rows, in, out, 1.0f, dz, out, bf16_data(w16), in, 0.0f, dx, in);
}

void linear_map_backward_weight(const Kernels& k, const float* dz, const float* x,
                                std::int64_t rows, std::int64_t in, std::int64_t out, float alpha,
                                float beta, Tensor& dw) {
  auto* dw_data = static_cast<float*>(dw.raw_data());
  if (!k.bf16_products()) {
    linear_backward_weight(k, dz, x, rows, in, out, alpha, beta, dw_data);
    return;
  }
  Tensor x16 = k.empty({rows, in}, DType::bf16);
  k.to_bf16(x, static_cast<BFloat16*>(x16.raw_data()), rows * in);
  k.gemm_bf16(true, false, out, in, rows, alpha, dz, out, bf16_data(x16), in, beta, dw_data, in);
  k.drop_bf16_copy(dw);
}

}  // namespace tandem::models::detail
