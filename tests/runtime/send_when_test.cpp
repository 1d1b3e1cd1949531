// ActorSystem::send_when: a message delivered when an event completes, as a stage learns that
// its work on an asynchronous device is done. Events come from cpu streams here (the cuda ones
// complete through the same progress thread); a latch holds the stream's work back so that what
// happens before completion is observed deterministically, without timing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "runtime/actor_system.hpp"
#include "runtime/stream.hpp"

namespace tandem {
namespace {

struct Ready {
  static constexpr std::string_view kName = "test.ready";
  int value;
};

class Counter final : public Actor {
 public:
  Counter() : Actor("counter") {}
  std::atomic<int> got{0};
  std::atomic<int> last{-1};

 protected:
  void on_message(Message& m) override {
    last = m.as<Ready>().value;
    ++got;
  }
};

// A stream whose work waits until release().
class HeldStream {
 public:
  HeldStream() {
    stream_.enqueue([f = gate_.get_future().share()] { f.wait(); });
  }
  Stream& stream() { return stream_; }
  void release() { gate_.set_value(); }

 private:
  std::promise<void> gate_;
  Stream stream_;
};

TEST(SendWhen, DeliversOnlyOnceTheEventHasCompleted) {
  ActorSystem system(make_work_sharing({.workers = 1}));
  auto* c = system.spawn<Counter>();
  HeldStream held;
  const Event done = held.stream().record();
  system.send_when(done, c, make_message(Ready{7}));
  // The stream is held, so the event cannot have completed and nothing can have arrived.
  EXPECT_FALSE(done.query());
  EXPECT_EQ(c->got.load(), 0);
  EXPECT_EQ(system.active(), 1);  // a pending completion keeps the system busy, like a timer
  held.release();
  system.wait_idle();  // returns only after the delivery
  EXPECT_EQ(c->got.load(), 1);
  EXPECT_EQ(c->last.load(), 7);
  EXPECT_EQ(system.active(), 0);
}

TEST(SendWhen, AnEventAlreadyCompleteStillDeliversAsynchronously) {
  ActorSystem system(make_work_sharing({.workers = 1}));
  auto* c = system.spawn<Counter>();
  Stream stream;
  const Event done = stream.record();
  done.synchronize();
  system.send_when(done, c, make_message(Ready{1}));
  system.send_when(Event{}, c, make_message(Ready{2}));  // never recorded: counts as complete
  system.wait_idle();
  EXPECT_EQ(c->got.load(), 2);
}

TEST(SendWhen, AfterStopTheMessageIsADeadLetter) {
  ActorSystem system(make_work_sharing({.workers = 1}));
  auto* c = system.spawn<Counter>();
  HeldStream held;
  system.send_when(held.stream().record(), c, make_message(Ready{3}));
  system.stop();
  held.release();
  // The callback runs on the progress thread some time after the event: a bounded wait.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (system.dead_letters() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(system.dead_letters(), 1u);
  EXPECT_EQ(c->got.load(), 0);
}

// The progress thread's callback uses the system: destroying the system while a completion is
// pending must wait for it (ASan and TSan report the use after free otherwise).
TEST(SendWhen, DestroyingTheSystemWaitsForAPendingCompletion) {
  HeldStream held;
  auto system = std::make_unique<ActorSystem>(make_work_sharing({.workers = 1}));
  auto* c = system->spawn<Counter>();
  system->send_when(held.stream().record(), c, make_message(Ready{4}));
  // Most likely released while the destructor below already waits; either order is correct.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    held.release();
  });
  system.reset();
  releaser.join();
  SUCCEED();
}

}  // namespace
}  // namespace tandem
