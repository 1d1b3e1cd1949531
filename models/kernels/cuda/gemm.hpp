#pragma once

#include <cstddef>
#include <cstdint>

// CUDA twin of models/kernels/cpu/gemm.hpp through cuBLAS: the same row-major convention and
// arguments, then a precision and the stream (a cudaStream_t from Stream::native_handle()).
// Pointers are device memory. Failures of cuBLAS or of a launch throw std::runtime_error.
//
// Each (device, stream) gets its own cuBLAS handle, created on first use and bound to that
// stream, with a cuBLAS workspace and, for bf16, a conversion buffer from the device's caching
// allocator; after the first calls of each shape nothing is allocated. Calls from several
// threads are safe. Handles are never destroyed: a stream that is destroyed has drained, so a
// later stream that gets the same address reuses its handle safely.
namespace tandem::models::cuda {

enum class GemmPrecision {
  // f32 inputs and arithmetic (cuBLAS's pedantic f32: no TF32 or emulation, whatever the math
  // mode or environment says): within ~1e-6 of the CPU.
  f32,
  // Inputs rounded to TF32 (10-bit mantissa) on the tensor cores, f32 accumulation.
  tf32,
  // Inputs rounded to bf16 (8-bit mantissa) in a conversion kernel, f32 accumulation and
  // output. The inputs stay f32 tensors; the bf16 copies live in the stream's workspace.
  bf16,
};

const char* gemm_precision_name(GemmPrecision precision);

// Row-major C[M, N] = alpha * op(A) * op(B) + beta * C, op(A) is [M, K], op(B) is [K, N]; with
// trans_a, A is stored [K, M] (likewise B). beta = 0 never reads C; k = 0 gives beta * C.
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc, GemmPrecision precision, void* stream);

// `batch` independent GEMMs as above, the i-th on a + i * stride_a, b + i * stride_b and
// c + i * stride_c (strides in elements; a stride of 0 shares the operand between all).
// Attention's per-head products are this with strides of d_head.
void gemm_strided_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                          std::int64_t k, float alpha, const float* a, std::int64_t lda,
                          std::int64_t stride_a, const float* b, std::int64_t ldb,
                          std::int64_t stride_b, float beta, float* c, std::int64_t ldc,
                          std::int64_t stride_c, std::int64_t batch, GemmPrecision precision,
                          void* stream);

namespace detail {

// The cuBLAS workspace of `stream` on the current device (made with the stream's handle on first
// use; it lives as long as the process), for gemm_epilogue.cu's cuBLASLt calls on the same
// stream: work on one stream runs in order, so both libraries can use it.
struct GemmWorkspace {
  void* data;
  std::size_t bytes;
};
GemmWorkspace gemm_workspace(void* stream);

}  // namespace detail
}  // namespace tandem::models::cuda
