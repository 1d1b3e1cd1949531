#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace tandem::schedules {

// A duration (or delay) as a function of a slice's sample count: affine, fixed + per_sample * b,
// which covers constants and the profiles' linear fits; measured, a table t(1..n); or any
// function. The simulator and the planner's evaluators take the same type.
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
  // times[b - 1] = t(b) for b = 1..times.size(). Throws std::invalid_argument on an empty table
  // or on negative or non-finite entries.
  static Cost measured(std::vector<double> times);
  static Cost function(std::function<double(std::int64_t)> fn) {
    Cost c;
    c.fn_ = std::move(fn);
    return c;
  }

  // A measured cost beyond its table throws std::out_of_range.
  double operator()(std::int64_t samples) const {
    if (table_) return table_entry(samples);
    return fn_ ? fn_(samples) : fixed_ + per_sample_ * static_cast<double>(samples);
  }
  Cost scaled(double factor) const;

  // The largest slice the cost covers: a measured table's length; unbounded otherwise.
  std::int64_t max_samples() const;
  // (fixed, per_sample) for an affine cost (constants included): t(b) is exactly
  // fixed + per_sample * b.
  std::optional<std::pair<double, double>> affine_form() const;
  // t(0) = 0, then t(1) .. t(max_samples): indexable by slice size, for evaluators that look a
  // cost up many times. Throws std::invalid_argument when max_samples exceeds max_samples().
  std::vector<double> table(int max_samples) const;

 private:
  double table_entry(std::int64_t samples) const;

  double fixed_ = 0;
  double per_sample_ = 0;
  std::function<double(std::int64_t)> fn_;
  std::shared_ptr<const std::vector<double>> table_;  // t(0) = 0, t(1), ...: shared by copies
};

}  // namespace tandem::schedules
