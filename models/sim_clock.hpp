#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

#include "models/sim_costs.hpp"

namespace tandem::models {

// The virtual time of one sim worker (a stage): each op it runs on sim tensors adds the op's
// configured duration, so the worker can wait that long or advance its own virtual clock.
// Not thread-safe: one clock per worker.
class SimClock {
 public:
  explicit SimClock(SimCosts costs) : costs_(std::move(costs)) {}

  const SimCosts& costs() const { return costs_; }
  // Adds ms to the elapsed time and returns it; throws std::invalid_argument naming `op` when
  // ms is negative or not finite (a bad cost table).
  double charge(double ms, std::string_view op);
  // Whether charge() takes ms: finite and >= 0.
  static bool valid(double ms);
  double elapsed_ms() const { return elapsed_ms_; }
  std::int64_t ops() const { return ops_; }  // charges so far
  void reset() {
    elapsed_ms_ = 0;
    ops_ = 0;
  }

 private:
  SimCosts costs_;
  double elapsed_ms_ = 0;
  std::int64_t ops_ = 0;
};

}  // namespace tandem::models
