#include "schedules/cost.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace tandem::schedules {

Cost Cost::measured(std::vector<double> times) {
  if (times.empty()) throw std::invalid_argument("measured cost: empty table");
  auto table = std::make_shared<std::vector<double>>();
  table->reserve(times.size() + 1);
  table->push_back(0.0);
  for (std::size_t b = 0; b < times.size(); ++b) {
    if (!(times[b] >= 0) || !std::isfinite(times[b])) {
      throw std::invalid_argument("measured cost: t(" + std::to_string(b + 1) + ") = " +
                                  std::to_string(times[b]) + " must be finite and non-negative");
    }
    table->push_back(times[b]);
  }
  Cost c;
  c.table_ = std::move(table);
  return c;
}

double Cost::table_entry(std::int64_t samples) const {
  if (samples < 0 || samples >= static_cast<std::int64_t>(table_->size())) {
    throw std::out_of_range("measured cost: no entry for " + std::to_string(samples) +
                            " samples (the table covers 1.." + std::to_string(table_->size() - 1) +
                            ")");
  }
  return (*table_)[static_cast<std::size_t>(samples)];
}

Cost Cost::scaled(double factor) const {
  if (table_) {
    std::vector<double> times(table_->begin() + 1, table_->end());
    for (double& t : times) t *= factor;
    return measured(std::move(times));
  }
  if (!fn_) return affine(fixed_ * factor, per_sample_ * factor);
  return function([fn = fn_, factor](std::int64_t b) { return factor * fn(b); });
}

std::int64_t Cost::max_samples() const {
  if (table_) return static_cast<std::int64_t>(table_->size()) - 1;
  return std::numeric_limits<std::int64_t>::max();
}

std::optional<std::pair<double, double>> Cost::affine_form() const {
  if (table_ || fn_) return std::nullopt;
  return std::pair{fixed_, per_sample_};
}

std::vector<double> Cost::table(int max_samples) const {
  if (max_samples < 0 || max_samples > this->max_samples()) {
    throw std::invalid_argument("cost table: " + std::to_string(max_samples) +
                                " samples asked, the cost covers " +
                                std::to_string(this->max_samples()));
  }
  std::vector<double> out(static_cast<std::size_t>(max_samples) + 1, 0.0);
  for (int b = 1; b <= max_samples; ++b) out[b] = (*this)(b);
  return out;
}

}  // namespace tandem::schedules
