#include "runtime/detail/progress_thread.hpp"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "runtime/log.hpp"

namespace tandem::detail {
namespace {

class ProgressThread {
 public:
  void post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopped_) {
        if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
        queue_.push_back(std::move(fn));
        cv_.notify_one();
        return;
      }
    }
    invoke(fn);
  }

  bool on_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    return thread_.joinable() && thread_.get_id() == std::this_thread::get_id();
  }

  // At process exit: runs what is queued, then joins, so no callback runs during or after the
  // destruction of the statics it may touch.
  void shutdown() {
    std::thread t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
      cv_.notify_one();
      t = std::move(thread_);
    }
    if (t.joinable()) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();
      } else {
        t.join();
      }
    }
  }

 private:
  static void invoke(std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      tandem::log::error("Event::on_complete callback threw (dropped): {}", e.what());
    } catch (...) {
      tandem::log::error("Event::on_complete callback threw a non-std exception (dropped)");
    }
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      invoke(fn);
      fn = nullptr;  // captured handles (tensors, streams) are released off the lock too
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopped_ = false;
  std::thread thread_;
};

// Never destroyed: CUDA's host-function thread may post after static destruction has begun;
// it then finds the thread stopped and a valid object.
ProgressThread& progress() {
  static ProgressThread* p = new ProgressThread();
  return *p;
}

struct ShutdownAtExit {
  ~ShutdownAtExit() { progress().shutdown(); }
};

}  // namespace

void post_to_progress_thread(std::function<void()> fn) noexcept {
  // Constructed before the first callback is queued, so destroyed (joining the thread) before
  // the statics constructed earlier than that.
  static ShutdownAtExit guard;
  try {
    progress().post(std::move(fn));
  } catch (const std::exception& e) {
    tandem::log::error("Event::on_complete: could not queue a callback (dropped): {}", e.what());
  }
}

bool on_progress_thread() {
  return progress().on_thread();
}

}  // namespace tandem::detail
