#include "runtime/thread_budget.hpp"

#include <stdexcept>
#include <string>

namespace tandem {

ThreadBudget::ThreadBudget(std::size_t size) : size_(size) {
  if (size == 0) throw std::invalid_argument("ThreadBudget: size must be >= 1, got 0");
}

void ThreadBudget::acquire() {
  std::size_t n = in_use_.load(std::memory_order_relaxed);
  for (;;) {
    if (n < size_) {
      if (in_use_.compare_exchange_weak(n, n + 1, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
        break;
      }
      continue;  // n was reloaded
    }
    // Full: sleep until a release changes the count (C++20 atomic wait, a futex).
    in_use_.wait(n, std::memory_order_relaxed);
    n = in_use_.load(std::memory_order_relaxed);
  }
  std::size_t p = peak_.load(std::memory_order_relaxed);
  while (p < n + 1 && !peak_.compare_exchange_weak(p, n + 1, std::memory_order_relaxed)) {
  }
}

void ThreadBudget::release() {
  in_use_.fetch_sub(1, std::memory_order_release);
  in_use_.notify_one();
}

}  // namespace tandem
