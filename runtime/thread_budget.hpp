#pragma once
// Threads that several actor systems share. Each system keeps its own workers, but a worker
// runs an actor only while it holds one of the budget's threads: however many systems (an
// application's training sessions) run at once, at most `size` of their workers run actors at
// the same moment. A worker takes a thread for one resume (at most the scheduler's budget of
// messages) and gives it back after, so no system keeps the threads while another waits, and
// idle or parked workers hold none.
#include <atomic>
#include <cstddef>

namespace tandem {

class ThreadBudget {
 public:
  // `size` >= 1 (std::invalid_argument otherwise).
  explicit ThreadBudget(std::size_t size);

  std::size_t size() const { return size_; }
  // Blocks while `size` holders run.
  void acquire();
  void release();
  // The most threads held at once since construction.
  std::size_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  const std::size_t size_;
  std::atomic<std::size_t> in_use_{0};
  std::atomic<std::size_t> peak_{0};
};

}  // namespace tandem
