#pragma once
#include <stdexcept>

namespace tandem::schedules {

// Every error of this library: a malformed parameter, action list or text form, a deadlock.
// The message names what failed and where (device, action position, line and token).
class ScheduleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tandem::schedules
