#pragma once

#include <cstdint>

// CUDA twin of models/kernels/cpu/dropout.hpp: the same arguments, then the stream (a
// cudaStream_t from Stream::native_handle()). Pointers are device memory. Launch failures
// throw std::runtime_error naming the kernel.
namespace tandem::models::cuda {

// Inverted dropout on [samples, per_sample]: keep element (s, j) when
// uniform(key, (first_sample + s) * per_sample + j) >= p, scaling kept ones by 1 / (1 - p).
// The same counter-based generator as the CPU (runtime/counter_rng.hpp), so mask and values
// equal the CPU kernel's bit for bit: a stage may run forward on one device and backward (which
// recomputes the mask) on another. y may alias x.
void dropout_apply(const float* x, float* y, std::int64_t samples, std::int64_t per_sample, float p,
                   std::uint64_t key, std::int64_t first_sample, void* stream);

}  // namespace tandem::models::cuda
