#include <cmath>

#include "models/kernels/cuda/launch.cuh"
#include "models/kernels/cuda/optimizer.hpp"

namespace tandem::models::cuda {
namespace {

__global__ void sgd_plain_kernel(const float* p, const float* g, float* out, std::int64_t n,
                                 float lr, float wd) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    out[k] = p[k] - lr * (g[k] + wd * p[k]);
  }
}

__global__ void sgd_momentum_kernel(const float* p, const float* g, float* buf, float* out,
                                    std::int64_t n, float lr, float wd, float mom, bool nesterov,
                                    bool first) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const float d = g[k] + wd * p[k];
    const float b = first ? d : mom * buf[k] + d;
    buf[k] = b;
    out[k] = p[k] - lr * (nesterov ? d + mom * b : b);
  }
}

__global__ void adamw_kernel(const float* p, const float* g, float* m, float* v, float* out,
                             std::int64_t n, float decay, float step_size, float inv_sqrt_bc2,
                             float b1, float b2, float eps) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const float gk = g[k];
    const float mk = b1 * m[k] + (1.0f - b1) * gk;
    const float vk = b2 * v[k] + (1.0f - b2) * gk * gk;
    m[k] = mk;
    v[k] = vk;
    const float denom = sqrtf(vk) * inv_sqrt_bc2 + eps;
    out[k] = p[k] * decay - step_size * mk / denom;
  }
}

}  // namespace

void sgd_update(const float* p, const float* g, float* buf, float* out, std::int64_t n, double lr,
                double weight_decay, double momentum, bool nesterov, bool first_step,
                void* stream) {
  if (n <= 0) return;
  const auto lr_f = static_cast<float>(lr);
  const auto wd = static_cast<float>(weight_decay);
  const auto mom = static_cast<float>(momentum);
  if (mom == 0.0f) {
    sgd_plain_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(
        p, g, out, n, lr_f, wd);
  } else {
    sgd_momentum_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(
        p, g, buf, out, n, lr_f, wd, mom, nesterov, first_step);
  }
  detail::check_launch("sgd_update");
}

void adamw_update(const float* p, const float* g, float* m, float* v, float* out, std::int64_t n,
                  double lr, double weight_decay, double beta1, double beta2, double eps,
                  std::int64_t t, void* stream) {
  if (n <= 0) return;
  // The bias corrections in double on the host, as AdamW::step computes them.
  const auto td = static_cast<double>(t);
  const double bc1 = 1.0 - std::pow(beta1, td);
  const double bc2 = 1.0 - std::pow(beta2, td);
  adamw_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(
      p, g, m, v, out, n, static_cast<float>(1.0 - lr * weight_decay), static_cast<float>(lr / bc1),
      static_cast<float>(1.0 / std::sqrt(bc2)), static_cast<float>(beta1),
      static_cast<float>(beta2), static_cast<float>(eps));
  detail::check_launch("adamw_update");
}

}  // namespace tandem::models::cuda
