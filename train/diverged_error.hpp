#pragma once
// A run whose loss (or gradients' norm) stopped being finite: it stops at the step it saw it,
// as Session::run throws it.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tandem::train {

class DivergedError : public std::runtime_error {
 public:
  DivergedError(const std::string& what, std::int64_t step)
      : std::runtime_error(what), step_(step) {}
  std::int64_t step() const noexcept { return step_; }  // 0-based: the minibatch

 private:
  std::int64_t step_;
};

}  // namespace tandem::train
