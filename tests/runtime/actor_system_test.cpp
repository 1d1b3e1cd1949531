// System lifetime: wait_idle, and stop() with pending messages neither hangs nor leaks
// (the ASan/LSan configuration of CI runs this too).
#include "runtime/actor_system.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>

#include "runtime/manual_scheduler.hpp"

namespace tandem {
namespace {

struct Tick {
  static constexpr std::string_view kName = "test.tick";
  int n;
};

// Every message carries a handle to this tensor: once all messages are gone, the test's own
// handle is the only one left.
Tensor& probe() {
  static Tensor t = Tensor::zeros({1});
  return t;
}

class Slow final : public Actor {
 public:
  explicit Slow(std::string n) : Actor(std::move(n)) {}
  Actor* peer = nullptr;
  std::atomic<int> handled{0};

 protected:
  void on_message(Message& m) override {
    handled.fetch_add(1);
    const Tick t = m.as<Tick>();
    // Keeps the system busy so that stop() arrives with plenty pending.
    if (peer != nullptr && t.n > 0) {
      (void)send(peer, Tick{t.n - 1}, {probe()});
      (void)send(peer, Tick{t.n - 1}, {probe()});
    }
  }
};

TEST(ActorSystem, StopWithPendingMessagesReleasesEverything) {
  {
    ActorSystem system(make_work_sharing({.workers = 2}));
    auto* a = system.spawn<Slow>("a");
    auto* b = system.spawn<Slow>("b");
    a->peer = b;
    b->peer = a;
    // A message tree of 2^30 messages: far more than can be handled before stop().
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(system.send(a, Tick{30}, {probe()}).ok());
    for (int i = 0; i < 1000; ++i) (void)system.send(b, Tick{0}, {probe()});
    // Let the workers get going, so that stop() interrupts real work.
    while (a->handled.load() + b->handled.load() < 100) std::this_thread::yield();
    system.stop();
    EXPECT_EQ(system.send(a, Tick{0}).status, SendStatus::system_stopped);
  }
  EXPECT_TRUE(probe().storage_unique());  // every message's tensors were released
}

TEST(ActorSystem, DestructorWithoutStopIsClean) {
  {
    ActorSystem system(make_manual());
    auto* a = system.spawn<Slow>("a");
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(system.send(a, Tick{0}, {probe()}).ok());
  }
  EXPECT_TRUE(probe().storage_unique());
}

TEST(ActorSystem, WaitIdleReturnsAfterAllWorkIsDone) {
  ActorSystem system(make_work_sharing({.workers = 2}));
  auto* a = system.spawn<Slow>("a");
  auto* b = system.spawn<Slow>("b");
  a->peer = b;
  b->peer = a;
  ASSERT_TRUE(system.send(a, Tick{12}).ok());
  system.wait_idle();
  // A binary tree of depth 12 rooted at one message: 2^13 - 1 messages in all.
  EXPECT_EQ(a->handled.load() + b->handled.load(), (1 << 13) - 1);
  EXPECT_EQ(system.active(), 0);
}

TEST(ActorSystem, WorkSharingWithOneWorker) {
  ActorSystem system(make_work_sharing({.workers = 1, .budget = 1}));
  EXPECT_EQ(system.scheduler().worker_count(), 1u);
  auto* a = system.spawn<Slow>("a");
  auto* b = system.spawn<Slow>("b");
  a->peer = b;
  b->peer = a;
  ASSERT_TRUE(system.send(a, Tick{10}).ok());
  system.wait_idle();
  EXPECT_EQ(a->handled.load() + b->handled.load(), (1 << 11) - 1);
}

// A coordinator ends the run from its own handler, on a worker: the system stops, the
// workers exit, and the thread that owns the system joins them (wait_idle, stop, destructor).
class Coordinator final : public Actor {
 public:
  Coordinator() : Actor("coordinator") {}
  std::atomic<bool> stopped_system{false};

 protected:
  void on_message(Message&) override {
    system().stop();
    system().stop();  // idempotent on a worker too
    stopped_system.store(true);
  }
};

TEST(ActorSystem, StopFromAHandlerEndsTheRun) {
  for (std::size_t workers : {1u, 2u}) {
    {
      ActorSystem system(make_work_sharing({.workers = workers}));
      auto* c = system.spawn<Coordinator>();
      auto* s = system.spawn<Slow>("slow");
      for (int i = 0; i < 100; ++i) (void)system.send(s, Tick{0}, {probe()});
      ASSERT_TRUE(system.send(c, Tick{0}).ok());
      system.wait_idle();  // returns once the system is stopped, work pending or not
      while (!c->stopped_system.load()) std::this_thread::yield();
      EXPECT_TRUE(system.stopped());
      EXPECT_EQ(system.send(s, Tick{0}).status, SendStatus::system_stopped);
      EXPECT_EQ(system.error_count(), 0u);
      system.stop();  // joins the workers, the one that called stop() included
    }
    EXPECT_TRUE(probe().storage_unique());  // pending messages were released
  }
}

TEST(ActorSystem, StopFromAHandlerThenDestructor) {
  ActorSystem system(make_work_sharing({.workers = 2}));
  auto* c = system.spawn<Coordinator>();
  ASSERT_TRUE(system.send(c, Tick{0}).ok());
  while (!c->stopped_system.load()) std::this_thread::yield();
  // No stop() from this thread: the destructor joins every worker.
}

class Thrower final : public Actor {
 public:
  Thrower() : Actor("thrower") {}

 protected:
  void on_message(Message&) override { throw std::runtime_error("fatal"); }
};

TEST(ActorSystem, StopFromTheErrorHandler) {
  ActorSystem system(make_work_sharing({.workers = 2}));
  std::atomic<int> seen{0};
  system.set_error_handler([&](const ActorError& e) {
    EXPECT_EQ(e.actor, "thrower");
    system.stop();  // on the failing actor's worker
    seen.fetch_add(1);
  });
  auto* t = system.spawn<Thrower>();
  ASSERT_TRUE(system.send(t, Tick{0}).ok());
  while (seen.load() == 0) std::this_thread::yield();
  system.wait_idle();
  EXPECT_TRUE(system.stopped());
  EXPECT_EQ(system.error_count(), 1u);
}

}  // namespace
}  // namespace tandem
