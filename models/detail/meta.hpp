#pragma once

#include <cstdint>

#include "runtime/tensor.hpp"

namespace tandem::models::detail {

// Small i32 tensors in a layer's Saved that record what backward needs besides activations
// (an input shape, a dropout key), so backward never depends on anything but its arguments.
Tensor encode_shape(const Shape& shape);
Shape decode_shape(const Tensor& meta);

struct DropoutKey {
  std::uint64_t key = 0;
  std::int64_t first_sample = 0;
};
Tensor encode_dropout(const DropoutKey& k);
DropoutKey decode_dropout(const Tensor& meta);

}  // namespace tandem::models::detail
