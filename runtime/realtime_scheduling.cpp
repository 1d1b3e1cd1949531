#include "runtime/realtime_scheduling.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <sched.h>
#endif

namespace tandem {

void use_realtime_scheduling(int priority) {
  if (priority < 1 || priority > 99) {
    throw std::invalid_argument("real-time priority " + std::to_string(priority) +
                                " is outside [1, 99]");
  }
#if defined(__linux__)
  sched_param param{};
  param.sched_priority = priority;
  if (sched_setscheduler(0, SCHED_RR, &param) != 0) {
    const int err = errno;
    std::string what = "real-time scheduling (SCHED_RR, priority ";
    what += std::to_string(priority);
    what += ") refused: ";
    what += std::strerror(err);
    if (err == EPERM) what += " (needs CAP_SYS_NICE, or `ulimit -r` of at least the priority)";
    throw std::runtime_error(what);
  }
#else
  throw std::runtime_error("real-time scheduling (SCHED_RR) is not supported on this system");
#endif
}

}  // namespace tandem
