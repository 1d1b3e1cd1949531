#pragma once
#include <cstdint>
#include <functional>
#include <utility>

namespace tandem::schedules {

// A duration (or delay) as a function of a slice's sample count: affine, fixed + per_sample * b,
// which covers constants and the profiles' linear fits, or any function.
class Cost {
 public:
  Cost() = default;
  // Implicit so that a constant reads as one: StageCosts{.forward = 1, .backward = 2}.
  Cost(double constant) : fixed_(constant) {}  // NOLINT(google-explicit-constructor)
  static Cost affine(double fixed, double per_sample) {
    Cost c(fixed);
    c.per_sample_ = per_sample;
    return c;
  }
  static Cost function(std::function<double(std::int64_t)> fn) {
    Cost c;
    c.fn_ = std::move(fn);
    return c;
  }

  double operator()(std::int64_t samples) const {
    return fn_ ? fn_(samples) : fixed_ + per_sample_ * static_cast<double>(samples);
  }
  Cost scaled(double factor) const {
    if (!fn_) return affine(fixed_ * factor, per_sample_ * factor);
    return function([fn = fn_, factor](std::int64_t b) { return factor * fn(b); });
  }

 private:
  double fixed_ = 0;
  double per_sample_ = 0;
  std::function<double(std::int64_t)> fn_;
};

}  // namespace tandem::schedules
