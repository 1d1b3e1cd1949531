#include "runtime/timer_service.hpp"

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <mutex>
#include <optional>
#include <set>

namespace tandem {
namespace {
constexpr std::chrono::microseconds kSpinBeforeDeadline{60};
}  // namespace

struct TimerService::State {
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard{
      asio::make_work_guard(io)};
  std::mutex mu;
  bool stopped = false;
  std::set<std::shared_ptr<asio::steady_timer>> live;  // touched on the timer thread only
};

TimerService::TimerService() : state_(std::make_unique<State>()) {
  thread_ = std::thread([s = state_.get()] { s->io.run(); });
}

TimerService::~TimerService() {
  stop();
}

asio::io_context& TimerService::context() {
  return state_->io;
}

void TimerService::after(std::chrono::nanoseconds delay, std::function<void(bool)> fn) {
  at(std::chrono::steady_clock::now() + delay, std::move(fn));
}

void TimerService::at(std::chrono::steady_clock::time_point deadline,
                      std::function<void(bool)> fn) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopped) {
      fn(false);
      return;
    }
  }
  State* s = state_.get();
  asio::post(s->io, [s, deadline, fn = std::move(fn)]() mutable {
    // Woken a little early, the thread spins to the deadline: waking a sleeping thread costs
    // about 46 us on these machines, and the sim device's completions would pay it on every
    // cross-device dependency otherwise.
    auto timer = std::make_shared<asio::steady_timer>(s->io, deadline - kSpinBeforeDeadline);
    s->live.insert(timer);
    timer->async_wait([s, timer, deadline, fn = std::move(fn)](const std::error_code& ec) {
      s->live.erase(timer);
      if (!ec) {
        while (std::chrono::steady_clock::now() < deadline) {
        }
      }
      fn(!ec);
    });
  });
}

void TimerService::stop() {
  bool first = false;
  {
    std::lock_guard lock(state_->mu);
    first = !state_->stopped;
    state_->stopped = true;
  }
  State* s = state_.get();
  if (first) {
    // Cancel on the timer thread so every pending callback runs (with fired == false) before
    // the loop runs out of work.
    asio::post(s->io, [s] {
      for (const auto& t : s->live) t->cancel();
      s->guard.reset();
    });
  }
  // A callback that stops the service cannot join its own thread: a later stop() (the
  // destructor at the latest) does.
  if (std::this_thread::get_id() == thread_.get_id()) return;
  std::lock_guard lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

}  // namespace tandem
