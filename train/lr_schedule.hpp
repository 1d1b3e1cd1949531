#pragma once
// The learning rate of each step of a run (train.lr_schedule): what a Session's update rounds
// follow and what its progress records report.
#include <cstdint>

#include "train/job_spec.hpp"

namespace tandem::train {

// The learning rate of step `step` (0-based) of a run of `steps` steps: warm-up steps ramp
// linearly up to lr; the decay runs from lr at the first step after warm-up towards
// final_fraction * lr, which it would reach one step after the last.
double scheduled_lr(const LrSchedule& schedule, double lr, int64_t step, int64_t steps);

}  // namespace tandem::train
