#pragma once
// Helpers for packed cut rows (see cuts_of in planner/umpipe_problem.hpp).
#include <cstdint>

namespace tandem::planner::detail {

// The last word of a row with the final cut set and nothing past the minibatch.
inline std::uint64_t last_word(std::uint64_t word, int samples) {
  const int top = (samples - 1) % 64;
  const std::uint64_t valid = top == 63 ? ~std::uint64_t{0} : (std::uint64_t{2} << top) - 1;
  return (word | (std::uint64_t{1} << top)) & valid;
}

}  // namespace tandem::planner::detail
