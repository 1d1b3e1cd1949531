#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "models/kernels/cuda/gemm.hpp"
#include "models/kernels/cuda/launch.cuh"
#include "runtime/device.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models::cuda {
namespace {

// cuBLAS recommends 32 MiB of workspace on Hopper and 4 MiB before it; with less, some of its
// fastest kernels (split-K, stream-K) are not eligible.
constexpr std::size_t kWorkspaceHopper = std::size_t{32} << 20;
constexpr std::size_t kWorkspaceOlder = std::size_t{4} << 20;
// Each bf16 operand starts at a multiple of this many bytes, so cuBLAS sees aligned matrices.
constexpr std::size_t kAlign = 256;

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("cuda gemm: ") + what +
                             " failed: " + cudaGetErrorString(status));
  }
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuda gemm: ") + what +
                             " failed: " + cublasGetStatusString(status));
  }
}

// Device memory from the runtime's caching allocator: a Tensor of f32 words is the one owner
// type models/ has for it. Its blocks are keyed to the null stream, which is why a workspace
// is replaced only after its stream has drained (Context::bf16_buffer).
Tensor device_bytes(std::size_t bytes, int device) {
  const auto words = static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
  return Tensor::empty({words}, DType::f32, Device::cuda(device));
}

// A cuBLAS handle bound to one stream, with the memory its calls use. The mutex serialises the
// calls that share it (enqueueing is quick; the GPU work is ordered by the stream anyway).
struct Context {
  std::mutex mu;
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  Tensor workspace;  // cuBLAS's own, for the handle's life
  std::size_t workspace_bytes = 0;
  Tensor bf16;  // converted operands; grows to the largest call seen

  // At least `bytes` of bf16 scratch for work enqueued on `stream` next. Earlier calls' work
  // may still read the old buffer, and freeing it would let the allocator hand it to another
  // stream at once, so growing waits for the stream first. It happens only while shapes grow,
  // i.e. in the first step.
  void* bf16_buffer(std::size_t bytes, int device) {
    if (!bf16.defined() || bf16.nbytes() < bytes) {
      if (bf16.defined()) check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      bf16 = Tensor();
      bf16 = device_bytes(bytes, device);
    }
    return bf16.raw_data();
  }
};

// Never destroyed: cublasDestroy after the CUDA runtime has begun tearing down at exit is
// undefined, and the handles live as long as the process anyway.
struct Contexts {
  std::mutex mu;
  std::map<std::pair<int, cudaStream_t>, std::unique_ptr<Context>> by_stream;
};

Contexts& contexts() {
  static auto* all = new Contexts;
  return *all;
}

Context& context_for(int device, cudaStream_t stream) {
  Contexts& all = contexts();
  std::lock_guard<std::mutex> lock(all.mu);
  std::unique_ptr<Context>& slot = all.by_stream[{device, stream}];
  if (slot) return *slot;
  auto ctx = std::make_unique<Context>();
  ctx->stream = stream;
  check_cublas(cublasCreate(&ctx->handle), "cublasCreate");
  // Precision is chosen per call by the compute type; the default math mode lets none of them
  // be overridden.
  check_cublas(cublasSetMathMode(ctx->handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace comes after.
  check_cublas(cublasSetStream(ctx->handle, stream), "cublasSetStream");
  int major = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
             "cudaDeviceGetAttribute");
  const std::size_t bytes = major >= 9 ? kWorkspaceHopper : kWorkspaceOlder;
  ctx->workspace = device_bytes(bytes, device);
  ctx->workspace_bytes = bytes;
  check_cublas(cublasSetWorkspace(ctx->handle, ctx->workspace.raw_data(), bytes),
               "cublasSetWorkspace");
  slot = std::move(ctx);
  return *slot;
}

// The packed bf16 copy of `count` matrices [rows, cols] with leading dimension ld, the i-th at
// src + i * stride; matrix i lands at dst + i * rows * cols. These conversions run before every
// bf16 GEMM, over activations of up to tens of millions of elements, so they must move bytes at
// memory speed: a first version decoded each element's (matrix, row, column) with four 64-bit
// divisions and made bf16 blocks slower than TF32 ones (H200, in docs/benchmarks.md's git history).
//
// Contiguous operands (ld == cols, matrices back to back): a flat copy, four floats per load
// when the source is 16-byte aligned.
__global__ void to_bf16_flat_kernel(const float* src, std::int64_t n, bool vector,
                                    __nv_bfloat16* dst) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  std::int64_t done = 0;
  if (vector) {
    const std::int64_t quads = n / 4;
    const auto* in = reinterpret_cast<const float4*>(src);
    auto* out = reinterpret_cast<__nv_bfloat162*>(dst);
    for (std::int64_t i = first; i < quads; i += step) {
      const float4 v = in[i];
      out[2 * i] = __floats2bfloat162_rn(v.x, v.y);
      out[2 * i + 1] = __floats2bfloat162_rn(v.z, v.w);
    }
    done = quads * 4;
  }
  for (std::int64_t i = done + first; i < n; i += step) dst[i] = __float2bfloat16_rn(src[i]);
}

// Padded or strided operands: blockIdx.y walks the rows of all matrices (one division per row),
// the threads of x the columns.
__global__ void to_bf16_rows_kernel(const float* src, std::int64_t rows, std::int64_t cols,
                                    std::int64_t ld, std::int64_t stride, std::int64_t count,
                                    __nv_bfloat16* dst) {
  const std::int64_t all_rows = rows * count;
  for (std::int64_t rr = blockIdx.y; rr < all_rows; rr += gridDim.y) {
    const std::int64_t mat = rr / rows;
    const float* from = src + mat * stride + (rr - mat * rows) * ld;
    __nv_bfloat16* to = dst + rr * cols;
    for (std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
         c < cols; c += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      to[c] = __float2bfloat16_rn(from[c]);
    }
  }
}

// C = beta * C for k = 0, where cuBLAS would reject the leading dimensions of empty operands.
// beta = 0 writes zeros without reading C (it may hold NaN).
__global__ void scale_kernel(float* c, std::int64_t m, std::int64_t n, std::int64_t ldc,
                             std::int64_t stride_c, std::int64_t batch, float beta) {
  const std::int64_t per = m * n;
  const std::int64_t total = per * batch;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float* at = c + (i / per) * stride_c + ((i % per) / n) * ldc + i % n;
    *at = beta == 0.0f ? 0.0f : beta * *at;
  }
}

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

struct Operand {
  const void* data;
  std::int64_t ld;
  std::int64_t stride;
};

// Converts `count` stored matrices [rows, cols] (or one, for stride 0) to packed bf16 at dst;
// returns where cuBLAS reads them.
Operand convert(const float* src, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                std::int64_t stride, std::int64_t batch, __nv_bfloat16* dst, cudaStream_t s) {
  const std::int64_t count = stride == 0 ? 1 : batch;
  if (ld == cols && (count == 1 || stride == rows * cols)) {
    const std::int64_t n = rows * cols * count;
    const bool vector = reinterpret_cast<std::uintptr_t>(src) % 16 == 0 &&
                        reinterpret_cast<std::uintptr_t>(dst) % 8 == 0;
    to_bf16_flat_kernel<<<detail::grid_for(vector ? (n + 3) / 4 : n), detail::kBlock, 0, s>>>(
        src, n, vector, dst);
  } else {
    const dim3 grid(static_cast<unsigned>((cols + detail::kBlock - 1) / detail::kBlock),
                    static_cast<unsigned>(std::min<std::int64_t>(rows * count, 65535)));
    to_bf16_rows_kernel<<<grid, detail::kBlock, 0, s>>>(src, rows, cols, ld, stride, count, dst);
  }
  detail::check_launch("gemm to_bf16");
  return {dst, cols, stride == 0 ? 0 : rows * cols};
}

void run(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
         const float* a, std::int64_t lda, std::int64_t stride_a, const float* b, std::int64_t ldb,
         std::int64_t stride_b, float beta, float* c, std::int64_t ldc, std::int64_t stride_c,
         std::int64_t batch, bool batched, GemmPrecision precision, void* stream) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  cudaStream_t s = detail::as_stream(stream);
  if (k <= 0) {
    scale_kernel<<<detail::grid_for(m * n * batch), detail::kBlock, 0, s>>>(c, m, n, ldc, stride_c,
                                                                            batch, beta);
    detail::check_launch("gemm scale");
    return;
  }
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  Context& ctx = context_for(device, s);
  std::lock_guard<std::mutex> lock(ctx.mu);

  // The stored shapes: op(A) is [m, k], so A is [k, m] with trans_a.
  const std::int64_t a_rows = trans_a ? k : m;
  const std::int64_t a_cols = trans_a ? m : k;
  const std::int64_t b_rows = trans_b ? n : k;
  const std::int64_t b_cols = trans_b ? k : n;
  Operand opa{a, lda, stride_a};
  Operand opb{b, ldb, stride_b};
  cudaDataType in_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F_PEDANTIC;
  if (precision == GemmPrecision::tf32) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  } else if (precision == GemmPrecision::bf16) {
    in_type = CUDA_R_16BF;
    compute = CUBLAS_COMPUTE_32F;
    const std::int64_t a_count = stride_a == 0 ? 1 : batch;
    const std::int64_t b_count = stride_b == 0 ? 1 : batch;
    const std::size_t a_bytes =
        aligned(static_cast<std::size_t>(a_rows * a_cols * a_count) * sizeof(__nv_bfloat16));
    const std::size_t b_bytes =
        static_cast<std::size_t>(b_rows * b_cols * b_count) * sizeof(__nv_bfloat16);
    auto* buffer = static_cast<unsigned char*>(ctx.bf16_buffer(a_bytes + b_bytes, device));
    auto* a16 = reinterpret_cast<__nv_bfloat16*>(buffer);
    auto* b16 = reinterpret_cast<__nv_bfloat16*>(buffer + a_bytes);
    opa = convert(a, a_rows, a_cols, lda, stride_a, batch, a16, s);
    opb = convert(b, b_rows, b_cols, ldb, stride_b, batch, b16, s);
  }

  // cuBLAS is column-major, and a row-major [r, c] matrix is the column-major [c, r] matrix
  // with the same leading dimension. So row-major C = op(A) op(B) is column-major
  // C^T = op(B)^T op(A)^T: B comes first, with the same transpose flags and M, N swapped.
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (!batched) {
    check_cublas(
        cublasGemmEx_64(ctx.handle, tb, ta, n, m, k, &alpha, opb.data, in_type, opb.ld, opa.data,
                        in_type, opa.ld, &beta, c, CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  } else {
    check_cublas(cublasGemmStridedBatchedEx_64(ctx.handle, tb, ta, n, m, k, &alpha, opb.data,
                                               in_type, opb.ld, opb.stride, opa.data, in_type,
                                               opa.ld, opa.stride, &beta, c, CUDA_R_32F, ldc,
                                               stride_c, batch, compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  }
}

}  // namespace

namespace detail {

GemmWorkspace gemm_workspace(void* stream) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  Context& ctx = context_for(device, as_stream(stream));
  return {ctx.workspace.raw_data(), ctx.workspace_bytes};
}

}  // namespace detail

const char* gemm_precision_name(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::f32:
      return "f32";
    case GemmPrecision::tf32:
      return "tf32";
    case GemmPrecision::bf16:
      return "bf16";
  }
  return "?";
}

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc, GemmPrecision precision, void* stream) {
  run(trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1, false, precision,
      stream);
}

void gemm_strided_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                          std::int64_t k, float alpha, const float* a, std::int64_t lda,
                          std::int64_t stride_a, const float* b, std::int64_t ldb,
                          std::int64_t stride_b, float beta, float* c, std::int64_t ldc,
                          std::int64_t stride_c, std::int64_t batch, GemmPrecision precision,
                          void* stream) {
  run(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
      batch, true, precision, stream);
}

}  // namespace tandem::models::cuda
