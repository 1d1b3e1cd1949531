#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/tensor.hpp"

namespace tandem::models::detail {

// The output shape of a square pooling window over [batch, C, H, W] (the max and average
// pools); throws std::invalid_argument naming the layer (`who`) when the input is not an image
// the padded window fits.
inline Shape pooled_shape(const std::string& who, const Shape& input, std::int64_t kernel,
                          std::int64_t stride, std::int64_t pad) {
  if (input.size() != 4 || input[2] + 2 * pad < kernel || input[3] + 2 * pad < kernel) {
    throw std::invalid_argument(
        who + ": input shape " + shape_str(input) +
        " is not [batch, C, H, W] with H, W >= " + std::to_string(kernel - 2 * pad));
  }
  return {input[0], input[1], (input[2] + 2 * pad - kernel) / stride + 1,
          (input[3] + 2 * pad - kernel) / stride + 1};
}

}  // namespace tandem::models::detail
