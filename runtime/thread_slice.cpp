#include "runtime/thread_slice.hpp"

#include <algorithm>
#include <cstdint>

#if defined(__linux__)
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tandem {
namespace {

#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
// The kernel's struct sched_attr (include/uapi/linux/sched/types.h), which glibc does not
// declare; its `size` field lets either side tell the version apart.
struct SchedAttr {
  std::uint32_t size = sizeof(SchedAttr);
  std::uint32_t sched_policy = 0;
  std::uint64_t sched_flags = 0;
  std::int32_t sched_nice = 0;
  std::uint32_t sched_priority = 0;
  std::uint64_t sched_runtime = 0;  // ns: the slice, for SCHED_OTHER
  std::uint64_t sched_deadline = 0;
  std::uint64_t sched_period = 0;
  std::uint32_t sched_util_min = 0;
  std::uint32_t sched_util_max = 0;
};

bool get_attr(SchedAttr& attr) {
  return syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) == 0;
}
#endif

}  // namespace

bool request_thread_slice(std::chrono::microseconds slice) {
#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
  SchedAttr attr;
  // Only a normal thread's slice: a real-time thread (--realtime) keeps its policy, which
  // already preempts every normal thread.
  if (!get_attr(attr) || attr.sched_policy != SCHED_OTHER) return false;
  const auto us = std::clamp<std::int64_t>(slice.count(), 100, 100'000);
  SchedAttr wanted;
  wanted.sched_policy = SCHED_OTHER;
  wanted.sched_nice = attr.sched_nice;  // sched_setattr sets the nice value too: keep it
  wanted.sched_runtime = static_cast<std::uint64_t>(us) * 1000;
  return syscall(SYS_sched_setattr, 0, &wanted, 0) == 0;
#else
  (void)slice;
  return false;
#endif
}

bool request_precise_timers() {
#if defined(__linux__)
  return prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) == 0;  // 1 ns: 0 would mean the default
#else
  return false;
#endif
}

std::chrono::microseconds thread_slice() {
#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
  SchedAttr attr;
  if (!get_attr(attr) || attr.sched_policy != SCHED_OTHER) return {};
  return std::chrono::microseconds(attr.sched_runtime / 1000);
#else
  return {};
#endif
}

}  // namespace tandem
