#pragma once
// An actor that keeps every message it receives, for the channel tests: the other side of a
// channel under test, read from the test's thread.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/actor.hpp"
#include "runtime/message.hpp"

namespace tandem::transport::testing {

class Collector final : public Actor {
 public:
  explicit Collector(std::string name = "collector",
                     std::chrono::milliseconds patience = std::chrono::seconds(30))
      : Actor(std::move(name)), patience_(patience) {}

  // Whether `n` messages arrived within the collector's patience.
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, patience_, [&] { return got_.size() >= n; });
  }
  std::vector<Message> take() {
    std::lock_guard lock(mu_);
    return std::move(got_);
  }

 protected:
  void on_message(Message& msg) override {
    std::lock_guard lock(mu_);
    got_.push_back(std::move(msg));
    cv_.notify_all();
  }

 private:
  std::chrono::milliseconds patience_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Message> got_;
};

}  // namespace tandem::transport::testing
