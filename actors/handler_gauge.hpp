#pragma once
// How a watchdog on another thread sees one actor's handlers: whether its worker is inside one
// now and since when, and how many it finished. The worker writes it (two atomic stores and an
// increment per message); any thread reads it, while the worker may be stuck inside a handler.
#include <atomic>
#include <chrono>
#include <cstdint>

namespace tandem::actors {

class HandlerGauge {
 public:
  struct Reading {
    bool inside = false;
    double inside_s = 0;  // how long the worker has been inside, when it is
    std::uint64_t handled = 0;
  };

  // Around one handler, on the actor's worker; an exception leaves it too.
  class Scope {
   public:
    explicit Scope(HandlerGauge& gauge) : gauge_(gauge) {
      gauge_.since_ns_.store(now_ns(), std::memory_order_relaxed);
      gauge_.inside_.store(true, std::memory_order_release);
    }
    ~Scope() {
      gauge_.inside_.store(false, std::memory_order_relaxed);
      // After inside_ is cleared: a reader that sees this count sees the handler over.
      gauge_.handled_.fetch_add(1, std::memory_order_release);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    HandlerGauge& gauge_;
  };

  Reading read() const {
    Reading r;
    r.handled = handled_.load(std::memory_order_acquire);
    r.inside = inside_.load(std::memory_order_acquire);
    if (r.inside) {
      r.inside_s = static_cast<double>(now_ns() - since_ns_.load(std::memory_order_relaxed)) * 1e-9;
    }
    return r;
  }

 private:
  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  std::atomic<bool> inside_{false};
  std::atomic<std::int64_t> since_ns_{0};
  std::atomic<std::uint64_t> handled_{0};
};

}  // namespace tandem::actors
