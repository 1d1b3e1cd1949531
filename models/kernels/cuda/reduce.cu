#include "models/kernels/cuda/column_reduce.cuh"
#include "models/kernels/cuda/reduce.hpp"

namespace tandem::models::cuda {

void column_sum(const float* x, std::int64_t rows, std::int64_t cols, float alpha, float beta,
                float* out, void* stream) {
  detail::column_reduce<1>(detail::MatrixValue{x, cols}, rows, cols, alpha, beta, out, nullptr,
                           stream, "column_sum");
}

}  // namespace tandem::models::cuda
