#include "runtime/detail/work_sharing_scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "runtime/actor.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/thread_budget.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TANDEM_CPU_RELAX() _mm_pause()
#else
#define TANDEM_CPU_RELAX() std::this_thread::yield()
#endif

namespace tandem {

std::unique_ptr<Scheduler> make_work_sharing(WorkSharingOptions options) {
  if (options.workers == 0) {
    options.workers = std::max(1u, std::thread::hardware_concurrency());
  }
  if (options.budget == 0) options.budget = 1;
  if (options.spin < std::chrono::nanoseconds::zero()) options.spin = {};
  if (options.slice < std::chrono::microseconds::zero()) options.slice = {};
  return std::make_unique<detail::WorkSharingScheduler>(options);
}

namespace detail {
namespace {
using Clock = std::chrono::steady_clock;

thread_local WorkSharingScheduler* tl_scheduler = nullptr;
thread_local void* tl_worker = nullptr;

constexpr std::uint64_t kPtrMask = (std::uint64_t{1} << 48) - 1;
// A woken actor left in another worker's `next` slot this long is taken by an idle worker.
// A request/response hand-off on one worker takes well under a microsecond, so only an
// actor stuck behind a long handler waits this long; stealing sooner would move every
// ping-pong across cores.
constexpr auto kStealAfter = std::chrono::microseconds(3);
// How often a spinning worker looks at the other workers' slots: rarely enough that its
// reads do not keep pulling the owner's cache line away on every hand-off.
constexpr auto kSlotPollEvery = std::chrono::microseconds(1);
// A watching worker (see run()) looks at the slots this often, for this many rounds (10 ms).
constexpr auto kWatchEvery = std::chrono::microseconds(200);
constexpr int kWatchRounds = 50;
// A worker waiting for a timer wakes this long before its deadline and polls the clock to it: a
// wake-up from a condition variable lands tens of microseconds late on these machines.
constexpr auto kTimerLead = std::chrono::microseconds(60);
// A worker that keeps finding work looks at the timers every this many resumes.
constexpr std::uint32_t kTimerCheckEvery = 16;
// A spinner's yield that kept it off its core this long means another thread wanted the core
// (a busy neighbour, or the kernels' own threads): the workers then stop spinning and polling
// for kContendedFor, since a thread that runs past its scheduler slice beside busy threads
// waits a whole slice of theirs (about 1.4 ms here) to run again.
constexpr auto kPreemptedGap = std::chrono::microseconds(50);
constexpr auto kContendedFor = std::chrono::seconds(5);
// A timer waiter running this late past its deadline says the same: it was woken, but the
// kernel kept it off the cores (beside busy threads, a thread that used its share waits for the
// next tick, 4 ms). Measured by the waiter itself: a timer fired late by a worker that was
// running long handlers says nothing of the machine.
constexpr auto kLateTimer = std::chrono::microseconds(200);
// Beside busy threads, the parked workers other than the waiter wake this long after the
// waiter's deadline and fire the timers themselves if it has not: one thread kept off its
// core then no longer holds up every stage's completions.
constexpr auto kBackupAfter = std::chrono::microseconds(300);

Actor* actor_of(std::uint64_t slot) {
  return reinterpret_cast<Actor*>(static_cast<std::uintptr_t>(slot & kPtrMask));
}
}  // namespace

WorkSharingScheduler::WorkSharingScheduler(WorkSharingOptions options) : options_(options) {}

WorkSharingScheduler::~WorkSharingScheduler() {
  stop();
}

void WorkSharingScheduler::start(ActorSystem& system) {
  system_ = &system;
  if (options_.drive_timers) timers_ = &system.timers();
  workers_ = std::make_unique<Worker[]>(options_.workers);
  for (std::size_t i = 0; i < options_.workers; ++i) {
    workers_[i].thread = std::thread([this, i] { run(i); });
  }
}

// Activity accounting (ActorSystem::active): an actor woken into this worker's `next` slot
// takes no unit from the system's count; the worker counts it (Worker::units) and settles when
// it runs out of work. The count cannot reach 0 meanwhile: the actor whose handler woke it
// holds a unit the count still has, which only this worker's settle() gives back (so the
// worker settles before that actor leaves it for the shared queue). An actor
// leaving the worker by another way takes a unit of the count with it: displaced to the
// shared queue, pushed there after a yield, or stolen (the thief counts it before it takes
// it; the owner, finding its slot emptied, drops its own).
void WorkSharingScheduler::schedule(Actor* actor) {
  if (tl_scheduler == this) {
    // Woken by an actor on one of our workers. Running it next on this worker saves a
    // cross-thread hand-off, but only pays when no core is left idle for it: when a worker
    // sleeps, and none spins or watches (none would take the slot over) nor is being woken
    // already, share it and wake one.
    if (sleepers_.load(std::memory_order_relaxed) > 0 &&
        spinners_.load(std::memory_order_relaxed) == 0 &&
        watchers_.load(std::memory_order_relaxed) == 0 &&
        !waking_.load(std::memory_order_relaxed) &&
        !waking_.exchange(true, std::memory_order_acq_rel)) {
      system_->actor_scheduled();
      push_shared(actor);
      return;
    }
    auto* self = static_cast<Worker*>(tl_worker);
    const std::uint64_t tagged =
        (++self->puts << 48) | static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(actor));
    ++self->units;
    // Only the owner makes the slot non-empty, so an empty slot takes a plain store; a full
    // one is exchanged, as a thief may be taking it at the same moment. The actor displaced
    // goes to the shared queue, where an idle worker can take it.
    const bool had = std::exchange(self->outstanding, true);
    if (self->next.load(std::memory_order_relaxed) == 0) {
      if (had) --self->units;  // a thief took the previous one, with a unit of its own
      self->next.store(tagged, std::memory_order_release);
      return;
    }
    const std::uint64_t displaced = self->next.exchange(tagged, std::memory_order_acq_rel);
    --self->units;  // the displaced actor's (or, emptied meanwhile, the thief counted it)
    if (actor_of(displaced) != nullptr) {
      system_->actor_scheduled();
      push_shared(actor_of(displaced));
    }
    return;
  }
  system_->actor_scheduled();
  push_shared(actor);
}

void WorkSharingScheduler::settle(Worker& self) {
  system_->add_activity(std::exchange(self.units, 0));
}

void WorkSharingScheduler::expect_work() {
  // One worker is enough, and one already awake (spinning, or being woken) will do.
  if (sleepers_.load(std::memory_order_relaxed) == 0 ||
      spinners_.load(std::memory_order_relaxed) != 0 || waking_.load(std::memory_order_relaxed) ||
      prewake_.exchange(true, std::memory_order_acq_rel)) {
    return;
  }
  { std::lock_guard lock(park_mu_); }
  park_cv_.notify_one();
}

// Driven timers. An idle worker parks until the next deadline (one of them: the waiter), so the
// worker woken is the one that runs the actor the timer sends to, with no hand-off from a
// timer thread. A timer set while the waiter sleeps past it wakes the waiter; one set from
// outside the workers while none waits wakes a parked worker to wait for it; one set by a
// worker needs nothing: that worker looks at the timers before it parks.
void WorkSharingScheduler::timer_set(Clock::time_point deadline) {
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;  // see park(): seq_cst pairs
  std::lock_guard lock(park_mu_);
  if (waiter_parked_) {
    if (deadline - kTimerLead < waiter_until_) timer_cv_.notify_one();
  } else if (tl_scheduler != this) {
    park_cv_.notify_one();
  }
}

// Runs the due timers on this worker. Their sends wake actors into this worker's slot, counted
// in its units; an anchor unit keeps the system from looking idle until they are settled, as a
// running actor's unit does for the actors its handler wakes.
bool WorkSharingScheduler::fire_timers(Worker& self) {
  self.since_timer_check = 0;
  const bool backup = std::exchange(self.backup_woke, false);
  if (timers_ == nullptr || Clock::now() < timers_->next_deadline()) return false;
  system_->actor_scheduled();
  const bool fired = timers_->run_due();
  settle(self);
  system_->actor_went_idle();
  if (fired && backup) backup_fires_.fetch_add(1, std::memory_order_relaxed);
  return fired;
}

// The waiter, its deadline past, is running again (under `lock`): when the kernel kept it off
// its core for over kLateTimer, the cores are contended. Until it runs it still counts as
// parked, so a worker that parks meanwhile backs it up at once.
void WorkSharingScheduler::note_waiter_woke(std::unique_lock<std::mutex>& lock,
                                            Clock::time_point until) {
  if (auto* woke = waiter_woke_for_tests.load(std::memory_order_relaxed)) {
    lock.unlock();
    woke();
    lock.lock();
  }
  const Clock::time_point now = Clock::now();
  if (now - until > kLateTimer) {
    contended_until_.store((now + kContendedFor).time_since_epoch().count(),
                           std::memory_order_relaxed);
  }
}

// Polls the clock up to the next deadline (at most twice kTimerLead away).
void WorkSharingScheduler::await_deadline() const {
  const Clock::time_point limit = Clock::now() + 2 * kTimerLead;
  const Clock::time_point due = std::min(timers_->next_deadline(), limit);
  while (Clock::now() < due && !stopping_.load(std::memory_order_relaxed)) TANDEM_CPU_RELAX();
}

bool WorkSharingScheduler::contended(Clock::time_point now) const {
  return now.time_since_epoch().count() < contended_until_.load(std::memory_order_relaxed);
}

void WorkSharingScheduler::push_shared(Actor* actor) {
  ready_.enqueue(actor);
  // A read-modify-write, not a load: it is ordered with the parking worker's increment, so
  // either that worker's re-check sees the actor, or we see it parking and wake it.
  if (sleepers_.fetch_add(0, std::memory_order_acq_rel) > 0) {
    // Taking the lock orders this push with a parking worker: it either re-checks the queue
    // after us or already waits. The notify comes after the unlock: notified under the lock,
    // the woken worker blocked at once on the mutex we still held and had to be woken again
    // (two futex waits and wakes per hand-off, seen in `perf trace` of a channel's deliveries).
    bool waiter_only = false;
    {
      std::lock_guard lock(park_mu_);
      waiter_only = waiter_parked_ && sleepers_.load(std::memory_order_relaxed) == 1;
    }
    // The timer waiter sleeps on its own condition variable: when it is the only one parked,
    // it is the one to wake.
    (waiter_only ? timer_cv_ : park_cv_).notify_one();
  }
}

// `local_unit`: the actor's activity unit is this worker's (it came from the slot).
Actor* WorkSharingScheduler::try_take(Worker& self, bool& local_unit) {
  if (self.outstanding) {
    self.outstanding = false;
    if (Actor* a = actor_of(self.next.exchange(0, std::memory_order_acq_rel))) {
      local_unit = true;
      return a;
    }
    --self.units;  // stolen: the thief counted it
  }
  local_unit = false;
  Actor* a = nullptr;
  return ready_.try_dequeue(a) ? a : nullptr;
}

// Takes an actor that has waited at least kStealAfter in another worker's slot (every slot
// it finds occupied when `seen` is null: the caller is about to park).
Actor* WorkSharingScheduler::steal(const Worker& self, Seen* seen, Clock::time_point now) {
  for (std::size_t i = 0; i < options_.workers; ++i) {
    Worker& victim = workers_[i];
    if (&victim == &self) continue;
    std::uint64_t slot = victim.next.load(std::memory_order_relaxed);
    if (slot == 0) continue;
    if (seen != nullptr) {
      if (seen[i].slot != slot) {
        seen[i] = {slot, now};
        continue;
      }
      if (now - seen[i].since < kStealAfter) continue;
    }
    // Counted before it is taken: the owner drops its own unit once it sees the slot empty.
    system_->actor_scheduled();
    if (victim.next.compare_exchange_strong(slot, 0, std::memory_order_acq_rel)) {
      return actor_of(slot);
    }
    system_->actor_went_idle();
  }
  return nullptr;
}

Actor* WorkSharingScheduler::spin(Worker& self, std::unique_ptr<Seen[]>& seen) {
  const Clock::time_point start = Clock::now();
  if (contended(start)) return nullptr;
  spinners_.fetch_add(1, std::memory_order_acq_rel);
  Actor* actor = nullptr;
  Clock::time_point next_poll = start;
  Clock::time_point before_yield = start;
  for (std::uint32_t i = 0; actor == nullptr; ++i) {
    TANDEM_CPU_RELAX();
    if (ready_.size_approx() != 0 && ready_.try_dequeue(actor)) break;
    if ((i & 7) != 7) continue;
    // A spinner gives its core to any other runnable thread (a channel's progress thread,
    // another process's worker): with more threads than cores, a spinner that kept its core
    // for its whole time slice delayed the very work it waits for (2 cores, two processes
    // streaming 1 MiB messages: one-way latency 386 us with 50 us spins, 870 us with 500 us).
    std::this_thread::yield();
    const Clock::time_point now = Clock::now();
    if (now - before_yield > kPreemptedGap) {
      contended_until_.store((now + kContendedFor).time_since_epoch().count(),
                             std::memory_order_relaxed);
      break;
    }
    before_yield = now;
    if (now >= next_poll) {
      next_poll = now + kSlotPollEvery;
      if ((actor = steal(self, seen.get(), now)) != nullptr) break;
    }
    if (now - start >= options_.spin || stopping_.load(std::memory_order_relaxed)) break;
  }
  spinners_.fetch_sub(1, std::memory_order_acq_rel);
  return actor;
}

// One look of a watching worker: an actor still in the same slot after kStealAfter is stuck
// behind a long handler, whatever the handlers' length relative to kWatchEvery.
Actor* WorkSharingScheduler::watch_slots(const Worker& self, Seen* seen) {
  const Clock::time_point until = Clock::now() + 2 * kStealAfter;
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (Actor* a = steal(self, seen, now)) return a;
    if (now >= until) return nullptr;
    for (int i = 0; i < 16; ++i) TANDEM_CPU_RELAX();
  }
}

// Sleeps until woken (or a safety-net timeout), then returns what it finds, possibly nothing.
// `watch`: sleeps kWatchEvery only, takes only what waited in a slot since the last look, and
// is not woken by schedule() meanwhile (see run()). Sets `woken` when it was notified, and
// `prewoken` when an expect_work() was pending (the caller then spins instead of watching).
Actor* WorkSharingScheduler::park(Worker& self, Seen* seen, bool watch, bool& woken, bool& prewoken,
                                  bool& timer_soon) {
  Actor* actor = nullptr;
  std::unique_lock lock(park_mu_);
  // seq_cst with timer_set(): either it sees this worker parked, or this worker sees its timer.
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  if (watch) watchers_.fetch_add(1, std::memory_order_acq_rel);
  // A parked worker takes what waits in another's slot too: schedule() counted on a
  // spinning worker to take it over, and that worker is this one, about to sleep.
  if (!stopping_.load(std::memory_order_acquire) && !ready_.try_dequeue(actor) &&
      (actor = steal(self, watch ? seen : nullptr, Clock::now())) == nullptr) {
    const Clock::time_point due =
        timers_ != nullptr ? timers_->next_deadline() : Clock::time_point::max();
    if (due != Clock::time_point::max() && !waiter_parked_) {
      // The timer waiter: sleeps until the deadline, or shortly before it to poll the clock
      // the rest of the way where no other thread wants the core.
      const Clock::time_point now = Clock::now();
      const Clock::time_point until = contended(now) ? due : due - kTimerLead;
      if (until > now) {
        waiter_parked_ = true;
        waiter_until_ = until;
        woken = timer_cv_.wait_until(lock, until) == std::cv_status::no_timeout;
        if (!woken) note_waiter_woke(lock, until);
        waiter_parked_ = false;
      }
      timer_soon = true;
    } else {
      // The 50 ms timeout is a safety net only; a push takes the lock before it notifies.
      const Clock::time_point now = Clock::now();
      Clock::time_point until = now + (watch ? kWatchEvery : std::chrono::milliseconds(50));
      const bool backup = waiter_parked_ && contended(now) && waiter_until_ + kBackupAfter < until;
      if (backup) until = waiter_until_ + kBackupAfter;
      woken = park_cv_.wait_until(lock, until) == std::cv_status::no_timeout;
      self.backup_woke = backup && !woken;
    }
    if (!ready_.try_dequeue(actor)) actor = steal(self, seen, Clock::now());
  }
  if (watch) watchers_.fetch_sub(1, std::memory_order_relaxed);
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
  waking_.store(false, std::memory_order_relaxed);
  // Whoever leaves the park first answers an expect_work(), with what it found or by spinning.
  prewoken = prewake_.exchange(false, std::memory_order_acq_rel);
  return actor;
}

bool WorkSharingScheduler::resume_within_budget(Actor& actor, std::size_t budget) {
  ThreadBudget* shared = options_.shared_threads.get();
  if (shared == nullptr) return resume(actor, budget);
  shared->acquire();
  struct Release {
    ThreadBudget* b;
    ~Release() { b->release(); }
  } release{shared};
  return resume(actor, budget);
}

void WorkSharingScheduler::run(std::size_t index) {
  Worker& self = workers_[index];
  if (options_.slice.count() > 0) (void)request_thread_slice(options_.slice);  // best effort
  if (options_.drive_timers) (void)request_precise_timers();                   // best effort
  tl_scheduler = this;
  tl_worker = &self;
  auto seen = std::make_unique<Seen[]>(options_.workers);
  const std::size_t budget = system_->budget();
  while (!stopping_.load(std::memory_order_acquire)) {
    bool local_unit = false;
    if (++self.since_timer_check >= kTimerCheckEvery) (void)fire_timers(self);
    Actor* actor = try_take(self, local_unit);
    if (actor == nullptr) {
      settle(self);
      if (fire_timers(self)) actor = try_take(self, local_unit);
    }
    if (actor == nullptr) actor = spin(self, seen);
    // A worker that schedule() woke for nothing (the waker took the actor back itself, as a
    // ping-pong on one worker does) watches the slots for a while, waking itself every
    // kWatchEvery, instead of being woken again (a syscall in the waker) for every message.
    int watch_left = 0;
    while (actor == nullptr && !stopping_.load(std::memory_order_acquire)) {
      if (fire_timers(self)) {
        actor = try_take(self, local_unit);
        watch_left = 0;
        continue;
      }
      bool woken = false;
      const bool watch = watch_left > 0;
      bool prewoken = false;
      bool timer_soon = false;
      // A unit left here would keep the system from ever looking idle while this worker
      // sleeps: fire_timers() settles, but the try_take() after it may find its slot stolen
      // and drop the unit it counted for it.
      settle(self);
      actor = park(self, seen.get(), watch, woken, prewoken, timer_soon);
      if (actor == nullptr && timer_soon) {
        if (!contended(Clock::now())) await_deadline();  // then the loop's top runs the timer
        continue;
      }
      if (actor == nullptr && prewoken) {
        // Woken ahead of expected work (expect_work): spin for it, as after a resume.
        actor = spin(self, seen);
        watch_left = 0;
        continue;
      }
      if (watch) {
        --watch_left;
        if (actor == nullptr) actor = watch_slots(self, seen.get());
      } else if (woken && actor == nullptr && !contended(Clock::now())) {
        watch_left = kWatchRounds;  // not beside busy threads: its wake-ups would cost slices
      }
    }
    if (actor == nullptr) break;
    if (resume_within_budget(*actor, budget)) {
      // Yielded with work left: behind everyone else, for fairness, with a unit of the count.
      // The units it anchored (those of actors it woke here) are settled first: once it is in
      // the shared queue, another worker may take it and give its unit back.
      settle(self);
      if (local_unit) {
        --self.units;
        system_->actor_scheduled();
      }
      push_shared(actor);
    } else {
      --self.units;
    }
  }
  settle(self);
  // Actors left in `next` are dropped with the queue at stop: stop() discards pending work.
  tl_scheduler = nullptr;
  tl_worker = nullptr;
}

void WorkSharingScheduler::stop() {
  if (!stopping_.exchange(true)) {
    std::lock_guard lock(park_mu_);
    park_cv_.notify_all();
    timer_cv_.notify_all();
  }
  // A worker (an actor's handler, the error handler) cannot join itself: it only signals,
  // and the next stop() from another thread, or the destructor, joins everyone.
  if (tl_scheduler == this || workers_ == nullptr) return;
  std::lock_guard lock(join_mu_);
  for (std::size_t i = 0; i < options_.workers; ++i) {
    if (workers_[i].thread.joinable()) workers_[i].thread.join();
  }
}

void WorkSharingScheduler::wait_idle() {
  // Blocks on the system's idle notification: a polling waiter would wake thousands of times
  // per second and take a core's share from the workers and the timer thread.
  system_->wait_until_quiet();
}

}  // namespace detail
}  // namespace tandem
