#include "models/sim_clock.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace tandem::models {

bool SimClock::valid(double ms) {
  return std::isfinite(ms) && ms >= 0;
}

double SimClock::charge(double ms, std::string_view op) {
  if (!valid(ms)) {
    throw std::invalid_argument(std::string(op) + ": configured sim duration " +
                                std::to_string(ms) + " ms is not a finite value >= 0");
  }
  elapsed_ms_ += ms;
  ++ops_;
  return ms;
}

}  // namespace tandem::models
