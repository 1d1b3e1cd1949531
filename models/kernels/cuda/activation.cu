#include "models/kernels/cuda/activation.hpp"
#include "models/kernels/cuda/launch.cuh"
#include "models/kernels/cuda/reduce.hpp"

namespace tandem::models::cuda {
namespace {

// The constants and the x * sigmoid(2u) arrangement of cpu/math.hpp, so both backends agree to
// rounding.
constexpr float kGeluC = 0.7978845608028654f;
constexpr float kGeluA = 0.044715f;

__device__ float gelu(float x) {
  const float u2 = 2.0f * kGeluC * (x + kGeluA * x * x * x);
  return x / (1.0f + detail::clamped_exp(-u2));
}

__device__ float gelu_grad(float x) {
  const float u2 = 2.0f * kGeluC * (x + kGeluA * x * x * x);
  const float s = 1.0f / (1.0f + detail::clamped_exp(-u2));
  const float du2 = 2.0f * kGeluC * (1.0f + 3.0f * kGeluA * x * x);
  return s + x * s * (1.0f - s) * du2;
}

__device__ float act_value(float z, Activation act) {
  switch (act) {
    case Activation::relu:
      return fmaxf(z, 0.0f);
    case Activation::gelu:
      return gelu(z);
    case Activation::sigmoid:
      return 1.0f / (1.0f + detail::clamped_exp(-z));
    case Activation::tanh:
      return tanhf(z);
    default:
      return z;
  }
}

__device__ float act_grad(float dy, float saved, Activation act) {
  switch (act) {
    case Activation::relu:
      return saved > 0.0f ? dy : 0.0f;
    case Activation::gelu:
      return dy * gelu_grad(saved);
    case Activation::sigmoid:  // saved is the output, as for relu
      return dy * saved * (1.0f - saved);
    case Activation::tanh:
      return dy * (1.0f - saved * saved);
    default:
      return dy;
  }
}

__global__ void act_forward_kernel(const float* x, float* y, std::int64_t n, Activation act) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = act_value(x[i], act);
  }
}

__global__ void act_backward_kernel(const float* dy, const float* saved, float* dz, std::int64_t n,
                                    Activation act) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dz[i] = act_grad(dy[i], act == Activation::none ? 0.0f : saved[i], act);
  }
}

__global__ void bias_act_kernel(float* y, const float* bias, std::int64_t n, std::int64_t cols,
                                Activation act, float* pre) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float z = bias != nullptr ? y[i] + bias[i % cols] : y[i];
    if (act == Activation::gelu) pre[i] = z;
    y[i] = act_value(z, act);
  }
}

}  // namespace

void bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                      Activation act, float* pre, void* stream) {
  const std::int64_t n = rows * cols;
  if (n <= 0 || (bias == nullptr && act == Activation::none)) return;
  bias_act_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(
      y, bias, n, cols, act, pre);
  detail::check_launch("bias_act_forward");
}

void act_forward(const float* x, float* y, std::int64_t n, Activation act, void* stream) {
  if (n <= 0 || (act == Activation::none && x == y)) return;
  act_forward_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(x, y, n,
                                                                                            act);
  detail::check_launch("act_forward");
}

void act_backward(const float* dy, const float* saved, float* dz, std::int64_t n, Activation act,
                  void* stream) {
  if (n <= 0 || (act == Activation::none && dz == dy)) return;
  act_backward_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(
      dy, saved, dz, n, act);
  detail::check_launch("act_backward");
}

void act_backward_bias(const float* dy, const float* saved, float* dz, std::int64_t rows,
                       std::int64_t cols, Activation act, float* db, float alpha, float beta,
                       void* stream) {
  // Two passes (dz, then its column sums) rather than the CPU's fused one: a fused kernel would
  // need per-block partials in scratch memory, and dz is read back from L2 for typical sizes.
  act_backward(dy, saved, dz, rows * cols, act, stream);
  if (db != nullptr) column_sum(dz, rows, cols, alpha, beta, db, stream);
}

}  // namespace tandem::models::cuda
