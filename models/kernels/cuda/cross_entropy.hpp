#pragma once

#include <cstddef>
#include <cstdint>

#include "models/kernels/cpu/cross_entropy.hpp"

// CUDA twin of models/kernels/cpu/cross_entropy.hpp. Pointers are device memory; `stream` is a
// cudaStream_t from Stream::native_handle(). Launch failures throw std::runtime_error naming
// the kernel.
namespace tandem::models::cuda {

using cpu::CrossEntropySums;

// Device bytes of the scratch cross_entropy needs for `rows` rows.
std::size_t cross_entropy_scratch_bytes(std::int64_t rows);

// Softmax cross-entropy of logits [rows, classes] against class ids; when dlogits is not null
// writes scale * (softmax - onehot) (scale = 1 / rows gives the gradient of the mean loss, as
// the CPU callers use it). Where the CPU kernel returns the sums, this one writes them to
// *sums, a CrossEntropySums in device memory (read it after an event recorded on the stream):
// returning them would block on the stream. The per-row losses are added in a fixed order, so
// runs repeat bit for bit. scratch: cross_entropy_scratch_bytes(rows) of device memory,
// overwritten. Targets are not range-checked (that needs the host): a target outside
// [0, classes) makes the loss and its row of dlogits NaN.
void cross_entropy(const float* logits, const std::int32_t* targets, std::int64_t rows,
                   std::int64_t classes, float* dlogits, float scale, CrossEntropySums* sums,
                   void* scratch, void* stream);

}  // namespace tandem::models::cuda
