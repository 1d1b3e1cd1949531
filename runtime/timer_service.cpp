#include "runtime/timer_service.hpp"

#include <algorithm>

namespace tandem {
namespace {
// How long before a deadline the thread stops sleeping and polls the clock instead: a wake-up
// from a condition variable takes about 46 us on these machines, and lands later under load.
constexpr std::chrono::microseconds kPollBeforeDeadline{60};
}  // namespace

TimerService::TimerService(std::function<void()> approaching, std::chrono::microseconds slice)
    : approaching_(std::move(approaching)) {
  thread_ = std::thread([this, slice] {
    if (slice.count() > 0) (void)request_thread_slice(slice);  // best effort
    run();
  });
}

TimerService::TimerService(DrivenTimers driven)
    : earlier_(std::move(driven.earlier)), driven_(true) {}

TimerService::~TimerService() {
  stop();
}

void TimerService::after(std::chrono::nanoseconds delay, std::function<void(bool)> fn) {
  at(Clock::now() + delay, std::move(fn));
}

void TimerService::at(Clock::time_point deadline, std::function<void(bool)> fn) {
  bool earliest = false;
  {
    std::lock_guard lock(mu_);
    if (stopped_) {
      earliest = true;  // fires below, cancelled
    } else {
      Timer t{deadline, next_seq_++, std::move(fn)};
      earliest = heap_.empty() || later(heap_.front(), t);
      // A new earliest deadline may come before the sleeping thread means to wake.
      if (earliest && sleeping_) cv_.notify_one();
      heap_.push_back(std::move(t));
      std::push_heap(heap_.begin(), heap_.end(), later);
      if (earliest) publish_earliest();
      fn = nullptr;
    }
  }
  if (fn) {
    fn(false);
    return;
  }
  if (earliest && earlier_) earlier_(deadline);
}

void TimerService::publish_earliest() {
  const Clock::time_point front = heap_.empty() ? Clock::time_point::max() : heap_.front().deadline;
  earliest_.store(front.time_since_epoch().count(), std::memory_order_release);
}

TimerService::Clock::time_point TimerService::next_deadline() const noexcept {
  return Clock::time_point(Clock::duration(earliest_.load(std::memory_order_acquire)));
}

// One thread at a time takes and fires the due prefix of the heap: a thread that took a later
// batch while another still fired an earlier one would reach the receivers first. A thread
// that finds the firing taken leaves at once (workers never wait here); the firing thread looks
// again after letting go, so a timer that fell due meanwhile is not left behind.
bool TimerService::run_due() {
  bool any = false;
  while (Clock::now() >= next_deadline()) {
    if (firing_.exchange(true, std::memory_order_acquire)) return any;
    const bool fired = fire_due_batches();
    firing_.store(false, std::memory_order_release);
    if (!fired) break;  // stopped, or none due after all
    any = true;
  }
  return any;
}

// With firing_ held: fires due batches until none is left. False when none was due.
bool TimerService::fire_due_batches() {
  std::vector<Timer>& batch = firing_batch_;
  bool any = false;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return any;
      take_due(batch);
      publish_earliest();
    }
    if (batch.empty()) return any;
    any = true;
    for (Timer& t : batch) t.fn(true);
    batch.clear();
  }
}

bool TimerService::wait_for_due(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (stopped_) return false;
    if (heap_.empty()) {
      sleeping_ = true;
      cv_.wait(lock);
      sleeping_ = false;
      continue;
    }
    const Clock::time_point deadline = heap_.front().deadline;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return true;
    if (deadline - now > kPollBeforeDeadline) {
      sleeping_ = true;
      cv_.wait_until(lock, deadline - kPollBeforeDeadline);
      sleeping_ = false;
      continue;
    }
    // Close to the deadline: poll the clock without the lock (setters never wait for it). No
    // yield: with busy neighbours a yielded core came back milliseconds late. A timer set
    // meanwhile with an earlier deadline waits at most this window.
    lock.unlock();
    if (approaching_) approaching_();
    while (Clock::now() < deadline) {
    }
    lock.lock();
  }
}

void TimerService::take_due(std::vector<Timer>& batch) {
  const Clock::time_point now = Clock::now();
  while (!heap_.empty() && heap_.front().deadline <= now) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    batch.push_back(std::move(heap_.back()));
    heap_.pop_back();
  }
}

void TimerService::run() {
  std::vector<Timer> batch;
  std::unique_lock lock(mu_);
  while (wait_for_due(lock)) {
    take_due(batch);
    publish_earliest();
    lock.unlock();
    for (Timer& t : batch) t.fn(true);
    batch.clear();
    lock.lock();
  }
  cancel_pending(lock);
}

// Stopped: every pending timer hears so, in deadline order, on this thread.
void TimerService::cancel_pending(std::unique_lock<std::mutex>& lock) {
  std::vector<Timer> cancelled;
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    cancelled.push_back(std::move(heap_.back()));
    heap_.pop_back();
  }
  publish_earliest();
  lock.unlock();
  for (Timer& t : cancelled) t.fn(false);
}

void TimerService::stop() {
  {
    std::unique_lock lock(mu_);
    stopped_ = true;
    if (driven_) {  // no thread: cancelled here
      cancel_pending(lock);
      return;
    }
  }
  cv_.notify_one();
  // A callback that stops the service cannot join its own thread: a later stop() (the
  // destructor at the latest) does.
  if (std::this_thread::get_id() == thread_.get_id()) return;
  std::lock_guard lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

}  // namespace tandem
