#include "models/kernels/cpu/embedding.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/kernels/cpu/reduce.hpp"
#include "models/kernels/cpu/threading.hpp"

namespace tandem::models::cpu {
namespace {

void check_ids(const std::int32_t* ids, std::int64_t n, std::int64_t vocab) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw std::out_of_range("embedding: token id " + std::to_string(ids[i]) + " at position " +
                              std::to_string(i) + " outside [0, " + std::to_string(vocab) + ")");
    }
  }
}

}  // namespace

void embedding_forward(const std::int32_t* ids, const float* table, const float* pos, float* y,
                       std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::int64_t dim) {
  const std::int64_t n = batch * seq;
  check_ids(ids, n, vocab);
  const std::int64_t grain =
      std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(dim, 1));
  parallel_for(n, grain, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const float* src = table + static_cast<std::int64_t>(ids[i]) * dim;
      float* dst = y + i * dim;
      if (pos != nullptr) {
        const float* p = pos + (i % seq) * dim;
        for (std::int64_t c = 0; c < dim; ++c) dst[c] = src[c] + p[c];
      } else {
        std::memcpy(dst, src, static_cast<std::size_t>(dim) * sizeof(float));
      }
    }
  });
}

void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable, float* dpos,
                        std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::int64_t dim,
                        float alpha, float beta) {
  const std::int64_t n = batch * seq;
  check_ids(ids, n, vocab);
  // Counting sort of positions by id: each table row then gathers its own contributions.
  std::vector<std::int64_t> start(static_cast<std::size_t>(vocab + 1), 0);
  for (std::int64_t i = 0; i < n; ++i) ++start[static_cast<std::size_t>(ids[i]) + 1];
  for (std::int64_t v = 0; v < vocab; ++v) start[v + 1] += start[v];
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  {
    std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
    for (std::int64_t i = 0; i < n; ++i) order[fill[ids[i]]++] = i;
  }
  const std::int64_t grain =
      std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(dim, 1));
  parallel_for(vocab, grain, [&](std::int64_t v0, std::int64_t v1) {
    for (std::int64_t v = v0; v < v1; ++v) {
      float* row = dtable + v * dim;
      if (beta == 0.0f) {
        std::memset(row, 0, static_cast<std::size_t>(dim) * sizeof(float));
      } else if (beta != 1.0f) {
        for (std::int64_t c = 0; c < dim; ++c) row[c] *= beta;
      }
      for (std::int64_t j = start[v]; j < start[v + 1]; ++j) {
        const float* g = dy + order[j] * dim;
        for (std::int64_t c = 0; c < dim; ++c) row[c] += alpha * g[c];
      }
    }
  });
  if (dpos != nullptr) {
    // Sum over the batch of dy viewed as [batch, seq * dim].
    column_sum(dy, batch, seq * dim, alpha, beta, dpos);
  }
}

}  // namespace tandem::models::cpu
