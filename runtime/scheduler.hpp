#pragma once
// Scheduling policy, chosen by factory (never by actor inheritance).
#include <chrono>
#include <cstddef>
#include <memory>

#include "runtime/thread_slice.hpp"

namespace tandem {

class Actor;
class ActorSystem;
class ThreadBudget;

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Starts worker threads, if any. Called once by the ActorSystem that owns the scheduler.
  virtual void start(ActorSystem& system) = 0;
  // `actor` has messages and is not running anywhere: run it soon.
  virtual void schedule(Actor* actor) = 0;
  // Makes the workers exit; actors not yet resumed stay unresumed. Idempotent and callable
  // from a worker: there it only signals (a thread cannot join itself), and a later call from
  // another thread joins every worker.
  virtual void stop() = 0;
  // Blocks until the system is idle. Thread pools wait; the manual scheduler runs actors.
  virtual void wait_idle() = 0;
  virtual std::size_t worker_count() const = 0;
  // Messages an actor handles per resume before it yields; the single source of the budget
  // unless ActorSystemOptions::budget overrides it.
  virtual std::size_t budget() const = 0;
  // Work from outside the workers is due within microseconds (a timer about to fire): a hint
  // to have a worker awake for it rather than parked, whose wake-up would cost tens of
  // microseconds after the work arrived. Thread-safe; the default ignores it.
  virtual void expect_work() {}
  // Whether the workers run the system's timers (TimerService in driven mode, given to start()
  // through ActorSystem::timers()): an idle worker sleeps until the next deadline and runs what
  // the timer wakes itself. The default: the timers' own thread does.
  virtual bool drives_timers() const { return false; }
  // Driven timers: a timer set on any thread became the earliest (TimerService's `earlier`).
  virtual void timer_set(std::chrono::steady_clock::time_point deadline) { (void)deadline; }

 protected:
  // Runs `actor` for at most `budget` messages (see Actor): true when it must be resumed
  // again, false when it went idle. Only schedulers resume actors.
  static bool resume(Actor& actor, std::size_t budget);
};

struct WorkSharingOptions {
  std::size_t workers = 0;  // 0: one per hardware thread
  std::size_t budget = 64;  // messages per resume before an actor yields
  // How long an idle worker spins before it parks. Bounded in time, not iterations, so that
  // the progress threads (timers, UCX, CUDA) get the core back quickly whatever the CPU.
  std::chrono::nanoseconds spin = std::chrono::microseconds(50);
  // The scheduler slice each worker asks the system for (runtime/thread_slice.hpp): short, so
  // that a woken worker preempts busy neighbours at once. Zero: the system's default.
  std::chrono::microseconds slice = kRuntimeThreadSlice;
  // Whether idle workers run the system's timers (Scheduler::drives_timers).
  bool drive_timers = true;
  // Threads shared with other systems (runtime/thread_budget.hpp): a worker runs an actor only
  // while it holds one. Null: this system's workers answer to no one else.
  std::shared_ptr<ThreadBudget> shared_threads;
};

// A fixed pool of workers sharing one ready queue. An actor woken by a worker runs next on
// that same worker when that costs no parallelism (no other worker is idle, or the waker goes
// idle right away); an idle worker takes it over when it has waited a few microseconds.
// Workers spin briefly, then park.
std::unique_ptr<Scheduler> make_work_sharing(WorkSharingOptions options = {});

class ManualScheduler;
// Runs actors one message at a time on the calling thread (run_until_idle()): actor logic
// is tested without threads, sleeps or timing.
std::unique_ptr<ManualScheduler> make_manual();

}  // namespace tandem
