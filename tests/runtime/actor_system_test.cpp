// System lifetime: wait_idle, and stop() with pending messages neither hangs nor leaks
// (the ASan/LSan configuration of CI runs this too).
#include "runtime/actor_system.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "runtime/manual_scheduler.hpp"

namespace tandem {
namespace {

struct Tick {
  static constexpr std::string_view kName = "test.tick";
  int n;
};

struct Counted {
  static inline std::atomic<int> alive{0};
  Counted() { alive.fetch_add(1); }
  ~Counted() { alive.fetch_sub(1); }
};

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
      (void)send(peer, Tick{t.n - 1}, std::make_shared<Counted>());
      (void)send(peer, Tick{t.n - 1}, std::make_shared<Counted>());
    }
  }
};

TEST(ActorSystem, StopWithPendingMessagesReleasesEverything) {
  Counted::alive = 0;
  {
    ActorSystem system(make_work_sharing({.workers = 2}));
    auto* a = system.spawn<Slow>("a");
    auto* b = system.spawn<Slow>("b");
    a->peer = b;
    b->peer = a;
    // A message tree of 2^30 messages: far more than can be handled before stop().
    for (int i = 0; i < 8; ++i)
      ASSERT_TRUE(system.send(a, Tick{30}, std::make_shared<Counted>()).ok());
    for (int i = 0; i < 1000; ++i) (void)system.send(b, Tick{0}, std::make_shared<Counted>());
    // Let the workers get going, so that stop() interrupts real work.
    while (a->handled.load() + b->handled.load() < 100) std::this_thread::yield();
    system.stop();
    EXPECT_EQ(system.send(a, Tick{0}).status, SendStatus::system_stopped);
  }
  EXPECT_EQ(Counted::alive.load(), 0);  // every payload was released
}

TEST(ActorSystem, DestructorWithoutStopIsClean) {
  Counted::alive = 0;
  {
    ActorSystem system(make_manual());
    auto* a = system.spawn<Slow>("a");
    for (int i = 0; i < 10; ++i)
      ASSERT_TRUE(system.send(a, Tick{0}, std::make_shared<Counted>()).ok());
  }
  EXPECT_EQ(Counted::alive.load(), 0);
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

}  // namespace
}  // namespace tandem
