#pragma once
// Scheduling policy, chosen by factory (never by actor inheritance).
#include <cstddef>
#include <memory>

namespace tandem {

class Actor;
class ActorSystem;

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Starts worker threads, if any. Called once by the ActorSystem that owns the scheduler.
  virtual void start(ActorSystem& system) = 0;
  // `actor` has messages and is not running anywhere: run it soon.
  virtual void schedule(Actor* actor) = 0;
  // Joins the workers; actors not yet resumed stay unresumed.
  virtual void stop() = 0;
  // Blocks until the system is idle. Thread pools wait; the manual scheduler runs actors.
  virtual void wait_idle() = 0;
  virtual std::size_t worker_count() const = 0;
};

struct WorkSharingOptions {
  std::size_t workers = 0;              // 0: one per hardware thread
  std::size_t budget = 64;              // messages per resume before an actor yields
  std::size_t spin_iterations = 20000;  // ~tens of microseconds of spinning before parking
};

// A fixed pool of workers sharing one ready queue. An actor woken by a worker runs next on
// that same worker (no cross-thread hand-off for request/response chains); workers spin
// briefly, then park.
std::unique_ptr<Scheduler> make_work_sharing(WorkSharingOptions options = {});

class ManualScheduler;
// Runs actors one message at a time on the calling thread (run_until_idle()): actor logic
// is tested without threads, sleeps or timing.
std::unique_ptr<ManualScheduler> make_manual();

}  // namespace tandem
