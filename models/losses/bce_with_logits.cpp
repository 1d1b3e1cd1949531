#include "models/losses/bce_with_logits.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tandem::models::losses {

double BceWithLogits::element(float x, float t, float* grad) const {
  // A target outside [0, 1] makes the loss unbounded below: training would run away from it
  // rather than fail, so it is refused where it is read.
  if (!(t >= 0.0f && t <= 1.0f)) {
    throw std::out_of_range("loss bce_with_logits: target " + std::to_string(t) +
                            " is outside [0, 1]");
  }
  const double xd = x;
  const double e = std::exp(-std::fabs(xd));
  // sigmoid(x) from exp(-|x|) alone, which is at most 1.
  const double sigmoid = xd >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
  *grad = static_cast<float>(sigmoid - static_cast<double>(t));
  return std::max(xd, 0.0) - xd * static_cast<double>(t) + std::log1p(e);
}

}  // namespace tandem::models::losses
