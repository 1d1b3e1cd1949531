#pragma once
// An Asio io_context on its own thread, for timers. Nothing here ever runs on
// an actor worker, so a worker never blocks on I/O or time.
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace asio {
class io_context;
}

namespace tandem {

class TimerService {
 public:
  TimerService();
  ~TimerService();
  TimerService(const TimerService&) = delete;
  TimerService& operator=(const TimerService&) = delete;

  // Calls fn(true) on the timer thread no earlier than `delay` from now, or fn(false) when the
  // service stops first. Pending timers fire in deadline order; one whose deadline has
  // already passed when it reaches the timer thread fires at once.
  void after(std::chrono::nanoseconds delay, std::function<void(bool fired)> fn);
  // The same with an absolute deadline, so several timers can share one base time.
  void at(std::chrono::steady_clock::time_point deadline, std::function<void(bool fired)> fn);

  asio::io_context& context();
  // Cancels pending timers (their callbacks see fired == false) and joins the thread (unless
  // called on the timer thread itself). Idempotent, from any thread.
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::thread thread_;
  std::mutex join_mu_;
};

}  // namespace tandem
