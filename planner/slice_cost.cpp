#include "planner/slice_cost.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace tandem::planner {

SliceCost SliceCost::affine(double fixed, double per_sample, int max_samples) {
  if (max_samples < 1) throw std::invalid_argument("SliceCost: max_samples must be positive");
  std::vector<double> times(static_cast<std::size_t>(max_samples));
  for (int b = 1; b <= max_samples; ++b) {
    times[b - 1] = fixed + per_sample * static_cast<double>(b);
  }
  SliceCost cost = measured(std::move(times));
  cost.affine_ = std::pair{fixed, per_sample};
  return cost;
}

SliceCost SliceCost::measured(std::vector<double> times) {
  if (times.empty()) throw std::invalid_argument("SliceCost: empty table");
  SliceCost cost;
  cost.table_.assign(1, 0.0);
  for (std::size_t b = 0; b < times.size(); ++b) {
    if (!(times[b] >= 0) || !std::isfinite(times[b])) {
      throw std::invalid_argument("SliceCost: t(" + std::to_string(b + 1) +
                                  ") must be finite and non-negative");
    }
    cost.table_.push_back(times[b]);
  }
  return cost;
}

}  // namespace tandem::planner
