#include "models/data/dataset.hpp"

#include <stdexcept>

namespace tandem::models::data {

void Dataset::check_indices(std::span<const int64_t> indices) const {
  const int64_t n = size();
  for (const int64_t i : indices) {
    if (i < 0 || i >= n) {
      throw std::out_of_range(describe() + ": sample index " + std::to_string(i) + " outside [0, " +
                              std::to_string(n) + ")");
    }
  }
}

}  // namespace tandem::models::data
