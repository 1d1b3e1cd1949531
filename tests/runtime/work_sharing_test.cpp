// The work-sharing scheduler: an actor woken by a busy actor does not wait behind it while a
// core idles, and the scheduler's budget is the one actors run with. No timing assertions:
// busy intervals are recorded and compared with each other, never with a duration.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/actor_system.hpp"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

struct Tick {
  static constexpr std::string_view kName = "test.ws.tick";
  int n;
};

// Keeps its core busy (no sleep: a sleeping handler would free the core and hide the
// problem) for about `d`.
void busy_for(std::chrono::microseconds d) {
  const auto until = Clock::now() + d;
  volatile std::uint64_t sink = 0;
  while (Clock::now() < until) {
    for (int i = 0; i < 100; ++i) sink = sink * 31 + 7;
  }
}

// One stage of a two-stage pipeline: passes the token on, then computes for a while.
class Stage final : public Actor {
 public:
  explicit Stage(std::string n) : Actor(std::move(n)) {}
  Actor* peer = nullptr;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> busy;  // read after wait_idle

 protected:
  void on_message(Message& m) override {
    const int n = m.as<Tick>().n;
    if (n > 0) {
      ASSERT_TRUE(send(peer, Tick{n - 1}).ok());
    }
    const auto begin = Clock::now();
    busy_for(std::chrono::milliseconds(2));
    busy.emplace_back(begin, Clock::now());
  }
};

TEST(WorkSharing, ActorWokenByABusyActorRunsOnAnIdleWorker) {
  ActorSystem system(make_work_sharing({.workers = 2}));
  auto* a = system.spawn<Stage>("stage0");
  auto* b = system.spawn<Stage>("stage1");
  a->peer = b;
  b->peer = a;
  ASSERT_TRUE(system.send(a, Tick{40}).ok());
  system.wait_idle();
  ASSERT_EQ(a->busy.size() + b->busy.size(), 41u);
  int overlaps = 0;
  for (const auto& [ab, ae] : a->busy) {
    for (const auto& [bb, be] : b->busy) {
      if (ab < be && bb < ae) ++overlaps;
    }
  }
  // On one worker at a time the intervals would follow each other, never overlap.
  EXPECT_GT(overlaps, 0);
}

class Recorder final : public Actor {
 public:
  Recorder(std::string n, std::vector<std::string>* log, std::mutex* mu)
      : Actor(std::move(n)), log_(log), mu_(mu) {}

 protected:
  void on_message(Message&) override {
    std::lock_guard lock(*mu_);
    log_->push_back(name());
  }

 private:
  std::vector<std::string>* log_;
  std::mutex* mu_;
};

// Gives two actors a backlog of five messages each from the only worker, so that both are
// ready when it looks for work (and the shared queue, FIFO per producer, holds them in order).
class Feeder final : public Actor {
 public:
  Feeder() : Actor("feeder") {}
  Actor* a = nullptr;
  Actor* b = nullptr;

 protected:
  void on_message(Message&) override {
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(send(a, Tick{i}).ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(send(b, Tick{i}).ok());
  }
};

// How many times the log switches from one actor to the other.
int switches(const std::vector<std::string>& log) {
  int n = 0;
  for (std::size_t i = 1; i < log.size(); ++i) n += log[i] != log[i - 1] ? 1 : 0;
  return n;
}

std::vector<std::string> run_two_backlogs(std::size_t scheduler_budget,
                                          ActorSystemOptions options = {}) {
  ActorSystem system(make_work_sharing({.workers = 1, .budget = scheduler_budget}), options);
  std::vector<std::string> log;
  std::mutex mu;
  auto* feeder = system.spawn<Feeder>();
  feeder->a = system.spawn<Recorder>("a", &log, &mu);
  feeder->b = system.spawn<Recorder>("b", &log, &mu);
  EXPECT_TRUE(system.send(feeder, Tick{0}).ok());
  system.wait_idle();
  std::lock_guard lock(mu);
  return log;
}

TEST(WorkSharing, BudgetOfOneInterleavesBusyActorsOnOneWorker) {
  // Budget 1: the two actors take turns, one message each.
  const auto by_scheduler = run_two_backlogs(1);
  ASSERT_EQ(by_scheduler.size(), 10u);
  EXPECT_EQ(switches(by_scheduler), 9) << ::testing::PrintToString(by_scheduler);
  // The system's budget, when given, overrides the scheduler's.
  const auto overridden = run_two_backlogs(64, {.budget = 1});
  EXPECT_EQ(switches(overridden), 9) << ::testing::PrintToString(overridden);
  // 64 covers each backlog: one actor, then the other.
  const auto large = run_two_backlogs(64);
  EXPECT_EQ(switches(large), 1) << ::testing::PrintToString(large);
}

TEST(WorkSharing, SystemBudgetComesFromTheSchedulerUnlessOverridden) {
  ActorSystem by_scheduler(make_work_sharing({.workers = 1, .budget = 8}));
  EXPECT_EQ(by_scheduler.budget(), 8u);
  ActorSystem overridden(make_work_sharing({.workers = 1, .budget = 8}), {.budget = 3});
  EXPECT_EQ(overridden.budget(), 3u);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

struct Hop {
  static constexpr std::string_view kName = "test.ws.hop";
  int left;
};
struct Extra {
  static constexpr std::string_view kName = "test.ws.extra";
};

// Passes a hop on to its peer until none is left. Plain counter: read after wait_idle.
class Hopper final : public Actor {
 public:
  explicit Hopper(std::string n) : Actor(std::move(n)) {}
  Actor* peer = nullptr;
  int hops = 0;

 protected:
  void on_message(Message& m) override {
    if (!m.is<Hop>()) return;
    ++hops;
    const int left = m.as<Hop>().left;
    if (left > 0) {
      ASSERT_TRUE(send(peer, Hop{left - 1}).ok());
    }
  }
};

// Starts a hop chain (woken into this worker's slot, with no unit of the system's count of
// its own), then yields on the message it sent itself: another worker may take it from the
// shared queue and see it go idle while the chain still runs.
class Starter final : public Actor {
 public:
  explicit Starter(std::string n) : Actor(std::move(n)) {}
  Actor* first = nullptr;

 protected:
  void on_message(Message& m) override {
    if (!m.is<Hop>()) return;
    ASSERT_TRUE(send(first, Hop{m.as<Hop>().left}).ok());
    ASSERT_TRUE(send(this, Extra{}).ok());
  }
};

TEST(WorkSharing, WaitIdleWaitsForWakeUpsKeptOnAWorker) {
  constexpr int kHops = 2000;
  for (int round = 0; round < 100; ++round) {
    ActorSystem system(make_work_sharing({.workers = 2, .budget = 1}));
    auto* a = system.spawn<Hopper>("a");
    auto* b = system.spawn<Hopper>("b");
    auto* starter = system.spawn<Starter>("starter");
    a->peer = b;
    b->peer = a;
    starter->first = a;
    ASSERT_TRUE(system.send(starter, Hop{kHops - 1}).ok());
    system.wait_idle();
    ASSERT_EQ(a->hops + b->hops, kHops) << "round " << round;
    EXPECT_EQ(system.active(), 0);
  }
}

}  // namespace
}  // namespace tandem
