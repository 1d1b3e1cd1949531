#pragma once

#include <cstdint>

// CUDA twins of models/kernels/cpu/embedding.hpp: the same arguments in the same order, then
// the stream (a cudaStream_t from Stream::native_handle()). Pointers are device memory.
// Launch failures throw std::runtime_error naming the kernel.
//
// Ids are not range-checked here (a check would need a round trip to the host); the CPU
// kernels' std::out_of_range is the caller's to raise before the ids are uploaded. An id outside
// [0, vocab) makes its output row NaN (forward) and is skipped (backward), so a bad id shows in
// the loss instead of reading or writing out of bounds.
namespace tandem::models::cuda {

// y[b, t, :] = table[ids[b, t], :] + pos[t, :] (pos may be null).
void embedding_forward(const std::int32_t* ids, const float* table, const float* pos, float* y,
                       std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::int64_t dim,
                       void* stream);

// dtable = alpha * scatter_add(dy by ids) + beta * dtable; dpos = alpha * sum_b dy + beta * dpos
// (dpos may be null; beta = 0 never reads dtable or dpos). The scatter adds with atomics, so
// rows hit by several ids may differ in the last bits from run to run (and from the CPU).
void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable, float* dpos,
                        std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::int64_t dim,
                        float alpha, float beta, void* stream);

}  // namespace tandem::models::cuda
