#include "models/sim_clock.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace tandem::models {

double SimClock::charge(double ms, std::string_view op) {
  if (!std::isfinite(ms) || ms < 0) {
    throw std::invalid_argument(std::string(op) + ": configured sim duration " +
                                std::to_string(ms) + " ms is not a finite value >= 0");
  }
  elapsed_ms_ += ms;
  ++ops_;
  return ms;
}

}  // namespace tandem::models
