#pragma once
// Time a stage takes for a slice of b samples: affine (a + k b) or a measured table.
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace tandem::planner {

class SliceCost {
 public:
  SliceCost() = default;
  // t(b) = fixed + per_sample * b for b = 1..max_samples.
  static SliceCost affine(double fixed, double per_sample, int max_samples);
  // times[b - 1] = t(b) for b = 1..times.size(). Throws std::invalid_argument on negative or
  // non-finite entries.
  static SliceCost measured(std::vector<double> times);

  double operator()(int samples) const { return table_[static_cast<std::size_t>(samples)]; }
  int max_samples() const { return static_cast<int>(table_.size()) - 1; }
  // t(0) = 0, then t(1) .. t(max_samples): indexable by slice size.
  std::span<const double> table() const { return table_; }
  // (fixed, per_sample) when built by affine(): t(b) is then exactly fixed + per_sample * b.
  std::optional<std::pair<double, double>> affine_form() const { return affine_; }

 private:
  std::vector<double> table_{0.0};
  std::optional<std::pair<double, double>> affine_;
};

}  // namespace tandem::planner
