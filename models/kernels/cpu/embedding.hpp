#pragma once

#include <cstdint>

namespace tandem::models::cpu {

// y[b, t, :] = table[ids[b, t], :] + pos[t, :] (pos may be null). Throws std::out_of_range
// naming the first id outside [0, vocab).
void embedding_forward(const std::int32_t* ids, const float* table, const float* pos, float* y,
                       std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::int64_t dim);

// dtable = alpha * scatter_add(dy by ids) + beta * dtable; dpos = alpha * sum_b dy + beta * dpos
// (dpos may be null). Rows of dtable are owned by one task each and ids are visited in order,
// so the result does not depend on the number of threads.
void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable, float* dpos,
                        std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::int64_t dim,
                        float alpha, float beta);

}  // namespace tandem::models::cpu
