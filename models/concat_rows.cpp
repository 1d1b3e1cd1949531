#include "models/concat_rows.hpp"

#include <stdexcept>
#include <string>

namespace tandem::models {

Tensor concat_rows(const Kernels& k, std::span<const Tensor> parts) {
  if (parts.empty()) throw std::invalid_argument("concat_rows: no tensors");
  const Tensor& first = parts.front();
  if (parts.size() == 1) return first;
  if (first.rank() == 0) {
    throw std::invalid_argument("concat_rows: " + first.describe() + " has rank 0");
  }
  Shape shape = first.shape();
  std::int64_t rows = 0;
  for (const Tensor& p : parts) {
    const bool same_tail = p.rank() == first.rank() &&
                           std::equal(p.shape().begin() + 1, p.shape().end(), shape.begin() + 1);
    if (!same_tail || p.dtype() != first.dtype() || p.device() != k.device()) {
      throw std::invalid_argument("concat_rows: " + p.describe() + " does not match " +
                                  first.describe() + " on " + k.device().str() +
                                  " (all but dimension 0 must agree)");
    }
    rows += p.dim(0);
  }
  shape[0] = rows;
  Tensor out = k.empty(shape, first.dtype());
  auto* at = static_cast<std::byte*>(out.raw_data());
  for (const Tensor& p : parts) {
    if (p.nbytes() == 0) continue;
    k.copy_bytes(p.raw_data(), at, p.nbytes());
    at += p.nbytes();
  }
  return out;
}

}  // namespace tandem::models
