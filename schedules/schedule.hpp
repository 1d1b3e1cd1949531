#pragma once
#include <cstddef>

#include "schedules/action_generator.hpp"
#include "schedules/action_list.hpp"
#include "schedules/schedule_params.hpp"

namespace tandem::schedules {

// A schedule built from its parameters: a lazy generator per device, or the whole action list.
class Schedule {
 public:
  // Validates the parameters (ScheduleError). `custom` orders come from the text form instead.
  explicit Schedule(ScheduleParams params);

  const ScheduleParams& params() const { return params_; }
  int devices() const { return params_.total_replicas(); }
  bool finite() const { return params_.minibatches != 0; }

  ActionGenerator generator(int device) const;
  // Every action of every device; throws for an unbounded schedule.
  ActionList materialize() const;
  // At most `max_per_device` actions of every device.
  ActionList materialize(std::size_t max_per_device) const;

 private:
  ScheduleParams params_;
};

}  // namespace tandem::schedules
