// The defaults of Kernels' optional methods: a device without fused attention says so, and its
// fused methods refuse to run (a layer asks fused_attention() first); a device that computes
// its losses inline has no loss kernels; a device without bf16 products refuses those.
#include "models/kernels/kernels.hpp"

#include <stdexcept>
#include <string>

namespace tandem::models {
namespace {

[[noreturn]] void no_fused_attention(const Kernels& k, const char* what) {
  throw std::logic_error(std::string(what) + ": device " + k.device().str() +
                         " has no fused attention (ask fused_attention() first)");
}

[[noreturn]] void no_loss_kernels(const Kernels& k, const char* what) {
  throw std::logic_error(std::string(what) + ": device " + k.device().str() +
                         " has no loss kernels (its losses are computed inline)");
}

[[noreturn]] void no_bf16_products(const Kernels& k, const char* what) {
  throw std::logic_error(std::string(what) + ": device " + k.device().str() +
                         " has no bf16 products (ask bf16_products() first)");
}

}  // namespace

bool Kernels::bf16_products() const {
  return false;
}

Tensor Kernels::bf16_copy(const Tensor&) const {
  no_bf16_products(*this, "bf16_copy");
}

void Kernels::drop_bf16_copy(const Tensor&) const {}

void Kernels::to_bf16(const float*, BFloat16*, std::int64_t) const {
  no_bf16_products(*this, "to_bf16");
}

void Kernels::round_to_bf16(const float*, float*, std::int64_t) const {
  no_bf16_products(*this, "round_to_bf16");
}

void Kernels::gemm_bf16(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                        std::int64_t, const BFloat16*, std::int64_t, float, float*,
                        std::int64_t) const {
  no_bf16_products(*this, "gemm_bf16");
}

void Kernels::gemm_bf16_ab(bool, bool, std::int64_t, std::int64_t, std::int64_t, float,
                           const BFloat16*, std::int64_t, const BFloat16*, std::int64_t, float,
                           float*, std::int64_t) const {
  no_bf16_products(*this, "gemm_bf16_ab");
}

void Kernels::cross_entropy_loss(const float*, const std::int32_t*, std::int64_t, std::int64_t,
                                 float*, float, CrossEntropySums*) const {
  no_loss_kernels(*this, "cross_entropy_loss");
}

void Kernels::pointwise_loss(PointwiseLoss, const float*, const float*, std::int64_t, float*, float,
                             CrossEntropySums*) const {
  no_loss_kernels(*this, "pointwise_loss");
}

void Kernels::sum_losses(const float*, std::int64_t, CrossEntropySums*) const {
  no_loss_kernels(*this, "sum_losses");
}

bool Kernels::fused_attention(std::int64_t /*d_head*/) const {
  return false;
}

void Kernels::fused_attention_forward(const float*, float*, float*, std::int64_t, std::int64_t,
                                      std::int64_t, std::int64_t) const {
  no_fused_attention(*this, "fused_attention_forward");
}

void Kernels::fused_attention_backward(const float*, const float*, const float*, const float*,
                                       float*, std::int64_t, std::int64_t, std::int64_t,
                                       std::int64_t) const {
  no_fused_attention(*this, "fused_attention_backward");
}

void Kernels::sum_squares(const float*, std::int64_t, float*) const {
  throw std::logic_error("sum_squares: device " + device().str() +
                         " has no sum-of-squares kernel (gradient norms cannot be taken there)");
}

}  // namespace tandem::models
