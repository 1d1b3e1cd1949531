// The cpu implementation of Stream and Event: one worker thread per stream runs its queue in
// order. A thread per stream (rather than a shared pool) keeps order trivially and lets wait()
// block that stream's worker on another stream's event without stalling anyone else; streams
// are few (a handful per stage), so the threads are cheap.
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/detail/progress_thread.hpp"
#include "runtime/detail/stream_impl.hpp"

namespace tandem::detail {
namespace {

class CpuEvent final : public EventImpl {
 public:
  Device device() const override { return Device::cpu(); }

  bool query() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

  void synchronize() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }

  void on_complete(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!done_) {
        callbacks_.push_back(std::move(fn));
        return;
      }
    }
    post_to_progress_thread(std::move(fn));
  }

  std::exception_ptr error() override {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  std::optional<std::chrono::steady_clock::time_point> completed_at() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) return std::nullopt;
    return at_;
  }

  void complete(std::exception_ptr error) {
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      at_ = now;
      error_ = std::move(error);
      callbacks.swap(callbacks_);
    }
    cv_.notify_all();
    for (auto& fn : callbacks) post_to_progress_thread(std::move(fn));
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::chrono::steady_clock::time_point at_;  // when the stream's worker reached it
  std::exception_ptr error_;
  std::vector<std::function<void()>> callbacks_;
};

// Shared by the stream and its worker, so a worker whose stream was destroyed from inside its
// own queue (the last handle dropped by enqueued work) can still drain and exit.
struct Queue {
  struct Item {
    std::function<void(const std::exception_ptr& failed)> fn;
    bool runs_after_failure;  // records run regardless, so their events complete
  };

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> items;
  bool stopping = false;
  std::exception_ptr failed;  // touched by the worker only

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [this] { return stopping || !items.empty(); });
      if (items.empty()) return;  // stopping, and everything enqueued has run
      Item item = std::move(items.front());
      items.pop_front();
      lock.unlock();
      if (!failed || item.runs_after_failure) {
        try {
          item.fn(failed);
        } catch (...) {
          if (!failed) failed = std::current_exception();
        }
      }
      item.fn = nullptr;  // release captured handles before taking the lock again
      lock.lock();
    }
  }
};

class CpuStream final : public StreamImpl {
 public:
  CpuStream() : queue_(std::make_shared<Queue>()) {
    worker_ = std::thread([q = queue_] { q->run(); });
  }

  ~CpuStream() override {
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->stopping = true;
    }
    queue_->cv.notify_one();
    if (worker_.get_id() == std::this_thread::get_id()) {
      worker_.detach();  // it holds the queue and exits once the rest has run
    } else {
      worker_.join();
    }
  }

  Device device() const override { return Device::cpu(); }

  void enqueue(std::function<void()> fn) override {
    if (!fn) throw std::invalid_argument("Stream::enqueue on cpu: empty function");
    push({[fn = std::move(fn)](const std::exception_ptr&) { fn(); }, false});
  }

  std::shared_ptr<EventImpl> record() override {
    auto event = std::make_shared<CpuEvent>();
    push({[event](const std::exception_ptr& failed) { event->complete(failed); }, true});
    return event;
  }

  void wait(const std::shared_ptr<EventImpl>& event) override {
    if (event == nullptr) return;
    // Blocks this stream's own worker, never the caller: that is the order wait() promises. An
    // event that failed fails this stream too, since its work may depend on the failed work.
    push({[event](const std::exception_ptr&) { event->synchronize(); }, false});
  }

  void* native_handle() const override { return nullptr; }

 private:
  void push(Queue::Item item) {
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->items.push_back(std::move(item));
    }
    queue_->cv.notify_one();
  }

  std::shared_ptr<Queue> queue_;
  std::thread worker_;
};

}  // namespace

std::shared_ptr<StreamImpl> make_cpu_stream() {
  return std::make_shared<CpuStream>();
}

}  // namespace tandem::detail
