#pragma once
#include <concurrentqueue/concurrentqueue.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/scheduler.hpp"
#include "runtime/timer_service.hpp"

namespace tandem::detail {

// A test seam: when set, the timer waiter calls it each time its deadline wakes it, before it
// runs again (still counted as parked, park_mu_ released), standing for the kernel keeping it
// off its core (see kBackupAfter).
inline std::atomic<void (*)()> waiter_woke_for_tests{nullptr};

class WorkSharingScheduler final : public Scheduler {
 public:
  explicit WorkSharingScheduler(WorkSharingOptions options);
  ~WorkSharingScheduler() override;

  void start(ActorSystem& system) override;
  void schedule(Actor* actor) override;
  void stop() override;
  void wait_idle() override;
  void expect_work() override;
  bool drives_timers() const override { return options_.drive_timers; }
  void timer_set(std::chrono::steady_clock::time_point deadline) override;
  std::size_t worker_count() const override { return options_.workers; }
  std::size_t budget() const override { return options_.budget; }
  // How often a parked worker fired timers that the waiter, woken for them, had not fired
  // kBackupAfter past its deadline (beside busy threads).
  std::uint64_t backup_fires() const { return backup_fires_.load(std::memory_order_relaxed); }

 private:
  struct Worker {
    std::thread thread;
    // The actor that this worker's running actor woke last: it runs next here, with no
    // cross-thread hand-off. Other workers may take it when it has waited (see steal()),
    // so it is atomic. The low 48 bits hold the pointer, the high 16 a count of puts, so
    // that a thief can tell "the same wake-up, still waiting" from a new one.
    alignas(64) std::atomic<std::uint64_t> next{0};
    std::uint64_t puts = 0;  // owner only
    // Owner only. Whether `next` may hold what the owner put there (or a thief took it).
    bool outstanding = false;
    // Owner only: activity units kept here rather than in the system's count (see
    // schedule()): +1 per actor woken into `next`, -1 per actor gone idle on this worker.
    // Settled (ActorSystem::add_activity) before the worker looks for work elsewhere.
    std::int64_t units = 0;
    // Owner only: resumes since this worker last looked at the timers while it had work.
    std::uint32_t since_timer_check = 0;
    // Owner only: woken as the waiter's backup (see park()), until it next looks at the timers.
    bool backup_woke = false;
  };
  // What an idle worker remembers of another worker's `next` slot between two looks.
  struct Seen {
    std::uint64_t slot = 0;
    std::chrono::steady_clock::time_point since;
  };

  void run(std::size_t index);
  // resume(), holding one of options_.shared_threads while it runs (when there is one).
  bool resume_within_budget(Actor& actor, std::size_t budget);
  void push_shared(Actor* actor);
  Actor* try_take(Worker& self, bool& local_unit);
  void settle(Worker& self);
  Actor* spin(Worker& self, std::unique_ptr<Seen[]>& seen);
  Actor* steal(const Worker& self, Seen* seen, std::chrono::steady_clock::time_point now);
  Actor* park(Worker& self, Seen* seen, bool watch, bool& woken, bool& prewoken, bool& timer_soon);
  bool fire_timers(Worker& self);
  void await_deadline() const;
  void note_waiter_woke(std::unique_lock<std::mutex>& lock,
                        std::chrono::steady_clock::time_point until);
  // Whether a spinner found its core wanted by another thread, or the timer waiter ran late,
  // within kContendedFor of `now`.
  bool contended(std::chrono::steady_clock::time_point now) const;
  Actor* watch_slots(const Worker& self, Seen* seen);

  WorkSharingOptions options_;
  ActorSystem* system_ = nullptr;
  std::unique_ptr<Worker[]> workers_;
  moodycamel::ConcurrentQueue<Actor*> ready_;
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<int> spinners_{0};
  std::atomic<int> watchers_{0};
  std::atomic<bool> waking_{false};   // a worker is being woken for a woken actor
  std::atomic<bool> prewake_{false};  // a worker is being woken to spin for expected work
  std::atomic<bool> stopping_{false};
  std::mutex park_mu_;
  std::condition_variable park_cv_;
  // Driven timers (see run()): the system's TimerService, and the one parked worker that waits
  // for its next deadline (on timer_cv_, until waiter_until_; both under park_mu_).
  TimerService* timers_ = nullptr;
  std::condition_variable timer_cv_;
  bool waiter_parked_ = false;
  std::chrono::steady_clock::time_point waiter_until_;
  // Until when (steady_clock ticks) the workers neither spin nor poll the clock (see spin()).
  std::atomic<std::chrono::steady_clock::rep> contended_until_{0};
  std::atomic<std::uint64_t> backup_fires_{0};
  std::mutex join_mu_;  // serialises joins when several threads call stop()
};

}  // namespace tandem::detail
