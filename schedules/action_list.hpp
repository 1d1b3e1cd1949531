#pragma once
#include <cstddef>
#include <vector>

#include "schedules/action.hpp"
#include "schedules/schedule_params.hpp"

namespace tandem::schedules {

// A finite schedule as data: one action order per device (see ScheduleParams for the device
// numbering). What the validator checks, the simulator times and the text form prints.
struct ActionList {
  ScheduleParams params;
  std::vector<std::vector<Action>> devices;

  std::size_t size() const {
    std::size_t n = 0;
    for (const auto& d : devices) n += d.size();
    return n;
  }
};

}  // namespace tandem::schedules
