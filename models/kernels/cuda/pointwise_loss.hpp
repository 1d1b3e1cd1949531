#pragma once
// CUDA kernels of the element-wise losses (models/losses/) and of the sum of an application's
// per-element losses. Pointers are device memory; `stream` is a cudaStream_t from
// Stream::native_handle(). Launch failures throw std::runtime_error naming the kernel.
#include <cstddef>
#include <cstdint>

#include "models/kernels/kernels.hpp"

namespace tandem::models::cuda {

// Device bytes of the scratch pointwise_loss needs for n elements.
std::size_t pointwise_loss_scratch_bytes(std::int64_t n);

// Each element's loss (in double, as the CPU adds them) and dx = scale * its derivative, then
// *sums = {their sum in a fixed order, 0}, so runs repeat bit for bit. A bce_with_logits target
// outside [0, 1] makes its loss NaN (the CPU throws instead; a kernel cannot).
void pointwise_loss(PointwiseLoss loss, const float* x, const float* t, std::int64_t n, float* dx,
                    float scale, CrossEntropySums* sums, void* scratch, void* stream);

// *sums = {sum of the n values in double, in a fixed order, 0}.
void sum_losses(const float* values, std::int64_t n, CrossEntropySums* sums, void* stream);

}  // namespace tandem::models::cuda
