#pragma once
// The timers of an ActorSystem (send_after, send_at; the sim device's completions): a heap of
// deadlines, run either by a thread of its own or, driven, by whoever calls run_due() (the
// work-sharing scheduler's idle workers, which then wake at a deadline and run the actor its
// timer sends to themselves: one thread woken per timed hand-off instead of two).
//
// A timer costs a lock and a heap push, no system call: a pipeline of many sim stages sets one
// per action, tens of thousands a second. The thread (or the driving worker) sleeps until
// shortly before the earliest deadline (waking a sleeping thread takes tens of microseconds,
// which every cross-stage dependency would pay), then polls the clock to the deadline and runs
// every timer that is due in one batch.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/thread_slice.hpp"

namespace tandem {

// Driven mode: no thread of its own. `earlier` is called on the setting thread, outside the
// service's lock, whenever a new timer becomes the earliest, with its deadline.
struct DrivenTimers {
  std::function<void(std::chrono::steady_clock::time_point)> earlier;
};

class TimerService {
 public:
  // `approaching`, when set, is called on the timer thread as it stops sleeping before a
  // deadline (ActorSystem: Scheduler::expect_work, so that a worker is awake when it fires).
  // `slice`: the scheduler slice the timer thread asks for (runtime/thread_slice.hpp); zero:
  // the system's default.
  explicit TimerService(std::function<void()> approaching = {},
                        std::chrono::microseconds slice = kRuntimeThreadSlice);
  explicit TimerService(DrivenTimers driven);
  ~TimerService();
  TimerService(const TimerService&) = delete;
  TimerService& operator=(const TimerService&) = delete;

  // Calls fn(true) on the timer thread no earlier than `delay` from now, or fn(false) when the
  // service stops first. Pending timers fire in deadline order (equal deadlines in the order
  // they were set); one whose deadline has already passed fires at once.
  void after(std::chrono::nanoseconds delay, std::function<void(bool fired)> fn);
  // The same with an absolute deadline, so several timers can share one base time.
  void at(std::chrono::steady_clock::time_point deadline, std::function<void(bool fired)> fn);

  // The earliest pending deadline; time_point::max() when none (or stopped). Lock-free.
  std::chrono::steady_clock::time_point next_deadline() const noexcept;
  // Driven mode: runs every timer due by now on the calling thread, earliest first. False when
  // none was due, or when another thread is running them (it then runs these too). Threads
  // may call it concurrently: each timer fires once, and in deadline order across threads.
  bool run_due();

  // Cancels pending timers (their callbacks see fired == false, on the timer thread; driven, on
  // the calling thread) and joins the thread (unless called on the timer thread itself).
  // Idempotent, from any thread.
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Timer {
    Clock::time_point deadline;
    std::uint64_t seq = 0;  // ties broken by the order of setting
    std::function<void(bool)> fn;
  };
  // std::push_heap's order: the earliest deadline at the front.
  static bool later(const Timer& a, const Timer& b) {
    return a.deadline != b.deadline ? a.deadline > b.deadline : a.seq > b.seq;
  }

  void run();
  // With mu_ held: waits until the earliest timer is due (or a change to look at). False when
  // the service stopped.
  bool wait_for_due(std::unique_lock<std::mutex>& lock);
  // Driven mode, with firing_ held: fires due timers, batch after batch, until none is due.
  bool fire_due_batches();
  // With mu_ held: moves the due timers, earliest first, into `batch`.
  void take_due(std::vector<Timer>& batch);
  // With mu_ held: publishes the heap's front for next_deadline().
  void publish_earliest();
  // With mu_ held (released on return): cancels every pending timer on the calling thread.
  void cancel_pending(std::unique_lock<std::mutex>& lock);

  std::function<void()> approaching_;
  std::function<void(Clock::time_point)> earlier_;  // driven mode
  const bool driven_ = false;
  std::atomic<Clock::rep> earliest_{Clock::time_point::max().time_since_epoch().count()};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Timer> heap_;  // under mu_
  std::uint64_t next_seq_ = 0;
  bool stopped_ = false;
  std::atomic<bool> firing_{false};  // driven: a thread is in fire_due_batches()
  std::vector<Timer> firing_batch_;  // under firing_ (its capacity kept between batches)
  bool sleeping_ = false;            // the thread waits on cv_ (a new earliest timer must wake it)
  std::thread thread_;
  std::mutex join_mu_;
};

}  // namespace tandem
