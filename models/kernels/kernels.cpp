// The defaults of Kernels' optional methods: a device without fused attention says so, and its
// fused methods refuse to run (a layer asks fused_attention() first); a device that computes
// its losses inline has no loss kernels.
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

}  // namespace

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
