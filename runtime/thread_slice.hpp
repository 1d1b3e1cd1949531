#pragma once
// A short scheduler slice for the runtime's latency-bound threads. Linux's EEVDF scheduler
// (6.6 and later) gives a woken thread a deadline of its virtual run time plus its slice, and
// lets it preempt the running thread only when that deadline comes first; with the default
// slice (0.75-3 ms) a worker or timer thread woken beside busy processes waited about that
// long per hand-off on the pipeline's critical path. A thread that asks for a short slice
// (since 6.12, any unprivileged thread may: sched_setattr's sched_runtime under SCHED_OTHER)
// preempts at once, and in return is itself preempted sooner when it runs long: it keeps its
// fair share, and only its latency changes. Kernels before 6.12 accept and ignore the request.
#include <chrono>

namespace tandem {

// What the actor workers and the timer thread ask for (see the measurements in
// docs/benchmarks.md, "tandem bench in one process, against the pipeline's depth").
inline constexpr std::chrono::microseconds kRuntimeThreadSlice{100};

// Asks for `slice` (the kernel's range is 100 us to 100 ms; values outside it are clamped) for
// the calling thread; threads it starts afterwards inherit it. False when the system refuses
// or lacks the call (a seccomp filter, a non-Linux system): the thread keeps the default.
bool request_thread_slice(std::chrono::microseconds slice);

// Asks that the calling thread's timed waits end on time rather than up to the default 50 us
// late (Linux's timer slack, which lets the kernel batch wake-ups): a worker that waits for a
// timer's deadline (runtime/timer_service.hpp, driven) wakes then. False where unsupported.
bool request_precise_timers();

// The calling thread's slice as the kernel reports it (the system's default when it asked for
// none); zero for a real-time thread or when the system cannot say.
std::chrono::microseconds thread_slice();

}  // namespace tandem
