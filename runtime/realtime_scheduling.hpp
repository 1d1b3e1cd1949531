#pragma once
// Real-time scheduling for a run on a shared machine. Under the default policy a woken runtime
// thread (a timer firing, a worker handed a message) waits behind busy neighbours for up to a
// scheduler slice, about a millisecond per hand-off on the critical path; under SCHED_RR it
// preempts them at once. Used by `tandem train --realtime` and `tandem bench --realtime`.
namespace tandem {

// Puts the calling thread under SCHED_RR at `priority` (1, the lowest real-time priority, is
// enough to preempt every normal thread); threads it starts afterwards inherit the policy (the
// actor workers, the timer and progress threads). Throws std::invalid_argument for a priority
// outside [1, 99], and std::runtime_error naming the policy and the system's reason when it is
// refused (without CAP_SYS_NICE, `ulimit -r` must allow the priority) or unsupported.
void use_realtime_scheduling(int priority = 1);

}  // namespace tandem
