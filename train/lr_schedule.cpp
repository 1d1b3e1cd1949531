#include "train/lr_schedule.hpp"

#include <cmath>
#include <numbers>

namespace tandem::train {

double scheduled_lr(const LrSchedule& schedule, double lr, int64_t step, int64_t steps) {
  if (step < schedule.warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(schedule.warmup_steps);
  }
  if (schedule.kind == "constant") return lr;
  // Progress reaches 1 one step after the last, so the last step still learns.
  const int64_t span = steps - schedule.warmup_steps;
  if (span <= 0) return lr;
  const double progress =
      static_cast<double>(step - schedule.warmup_steps) / static_cast<double>(span);
  const double final_lr = schedule.final_fraction * lr;
  if (schedule.kind == "linear") return lr + (final_lr - lr) * progress;
  return final_lr + (lr - final_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace tandem::train
