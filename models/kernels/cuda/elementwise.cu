#include "models/kernels/cuda/elementwise.hpp"
#include "models/kernels/cuda/launch.cuh"

namespace tandem::models::cuda {
namespace {

__global__ void scale_kernel(float* x, std::int64_t n, float beta) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    x[i] = beta == 0.0f ? 0.0f : beta * x[i];
  }
}

__global__ void add_kernel(const float* a, const float* b, float* dst, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = a[i] + b[i];
  }
}

__global__ void multiply_kernel(const float* a, const float* b, float alpha, float beta, float* out,
                                std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float p = alpha * a[i] * b[i];
    out[i] = beta == 0.0f ? p : p + beta * out[i];
  }
}

// y = e^x (log_x false) or ln x (true): the one loop of exp and log.
__global__ void exp_log_kernel(const float* x, float* y, std::int64_t n, bool log_x) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    y[i] = log_x ? logf(x[i]) : expf(x[i]);
  }
}

__global__ void fill_kernel(float* x, std::int64_t n, float value) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

__global__ void row_bias_act_kernel(float* y, const float* bias, std::int64_t rows,
                                    std::int64_t cols, bool relu) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float z = y[i] + bias[i / cols];
    y[i] = relu ? fmaxf(z, 0.0f) : z;
  }
}

// One block per row (grid-stride over rows): rows are channels, a handful to a few thousand.
__global__ void row_sum_kernel(const float* x, std::int64_t rows, std::int64_t cols, float alpha,
                               float beta, float* out) {
  __shared__ float scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = x + r * cols;
    float s = 0.0f;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    s = detail::block_sum(s, scratch);
    if (threadIdx.x == 0) out[r] = beta == 0.0f ? alpha * s : alpha * s + beta * out[r];
  }
}

__global__ void i32_to_f32_kernel(const std::int32_t* x, float* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    y[i] = static_cast<float>(x[i]);
  }
}

__global__ void f32_to_i32_kernel(const float* x, std::int32_t* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    y[i] = static_cast<std::int32_t>(x[i]);
  }
}

}  // namespace

void scale(float* x, std::int64_t n, float beta, void* stream) {
  if (n <= 0) return;
  scale_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(x, n, beta);
  detail::check_launch("scale");
}

void add(const float* a, const float* b, float* dst, std::int64_t n, void* stream) {
  if (n <= 0) return;
  add_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(a, b, dst, n);
  detail::check_launch("add");
}

void multiply(const float* a, const float* b, float alpha, float beta, float* out, std::int64_t n,
              void* stream) {
  if (n <= 0) return;
  multiply_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(
      a, b, alpha, beta, out, n);
  detail::check_launch("multiply");
}

void exp(const float* x, float* y, std::int64_t n, void* stream) {
  if (n <= 0) return;
  exp_log_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(x, y, n,
                                                                                        false);
  detail::check_launch("exp");
}

void log(const float* x, float* y, std::int64_t n, void* stream) {
  if (n <= 0) return;
  exp_log_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(x, y, n,
                                                                                        true);
  detail::check_launch("log");
}

void fill(float* x, std::int64_t n, float value, void* stream) {
  if (n <= 0) return;
  fill_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(x, n, value);
  detail::check_launch("fill");
}

void row_bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                          cpu::Activation act, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  if (act != cpu::Activation::none && act != cpu::Activation::relu) {
    throw std::invalid_argument(std::string("cuda row_bias_act_forward: ") +
                                cpu::activation_name(act) + " is not supported (none, relu)");
  }
  row_bias_act_kernel<<<detail::grid_for(rows * cols), detail::kBlock, 0,
                        detail::as_stream(stream)>>>(y, bias, rows, cols,
                                                     act == cpu::Activation::relu);
  detail::check_launch("row_bias_act_forward");
}

void row_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
             float* out, void* stream) {
  if (rows <= 0) return;
  if (cols <= 0) {
    scale(out, rows, beta, stream);
    return;
  }
  const unsigned grid = static_cast<unsigned>(std::min<std::int64_t>(rows, detail::kMaxBlocks));
  row_sum_kernel<<<grid, detail::kBlock, 0, detail::as_stream(stream)>>>(x, rows, cols, alpha, beta,
                                                                         out);
  detail::check_launch("row_sum");
}

void i32_to_f32(const std::int32_t* x, float* y, std::int64_t n, void* stream) {
  if (n <= 0) return;
  i32_to_f32_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(x, y, n);
  detail::check_launch("i32_to_f32");
}

void f32_to_i32(const float* x, std::int32_t* y, std::int64_t n, void* stream) {
  if (n <= 0) return;
  f32_to_i32_kernel<<<detail::grid_for(n), detail::kBlock, 0, detail::as_stream(stream)>>>(x, y, n);
  detail::check_launch("f32_to_i32");
}

}  // namespace tandem::models::cuda
