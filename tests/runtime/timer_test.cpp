// Timers fire in deadline order and never early.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/actor_system.hpp"
#include "runtime/detail/work_sharing_scheduler.hpp"
#include "runtime/manual_scheduler.hpp"
#include "runtime/timer_service.hpp"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

struct Alarm {
  static constexpr std::string_view kName = "test.alarm";
  int index;
};

class Recorder final : public Actor {
 public:
  Recorder() : Actor("recorder") {}
  std::vector<std::pair<int, Clock::time_point>> got;

 protected:
  void on_message(Message& m) override { got.emplace_back(m.as<Alarm>().index, Clock::now()); }
};

void check_order_and_deadlines(ActorSystem& system, Recorder* r, bool manual_run,
                               ManualScheduler* manual) {
  const std::vector<int> delays_ms = {9, 1, 5, 3, 7, 2, 8, 4, 6, 0};
  // One base time for all deadlines, far enough ahead that every timer is pending before the
  // first one is due: a deadline already past when its timer is registered fires on arrival,
  // before timers registered after it (seen under TSan on a loaded machine with a base of
  // "now"). Ordering is promised among pending timers, which is what this checks.
  const auto start = Clock::now() + std::chrono::milliseconds(200);
  for (std::size_t i = 0; i < delays_ms.size(); ++i) {
    system.send_at(start + std::chrono::milliseconds(delays_ms[i]), r, Alarm{delays_ms[i]});
  }
  if (manual_run) {
    manual->run_until_idle();
  } else {
    system.wait_idle();
  }
  ASSERT_EQ(r->got.size(), delays_ms.size());
  for (std::size_t i = 0; i < r->got.size(); ++i) {
    EXPECT_EQ(r->got[i].first, static_cast<int>(i)) << "fired out of order";
    EXPECT_GE(r->got[i].second - start, std::chrono::milliseconds(r->got[i].first))
        << "timer " << r->got[i].first << " fired early";
  }
}

TEST(Timers, FireInOrderAndNeverEarlyOnWorkers) {
  ActorSystem system(make_work_sharing({.workers = 2}));
  auto* r = system.spawn<Recorder>();
  check_order_and_deadlines(system, r, false, nullptr);
}

TEST(Timers, FireInOrderWithTheManualScheduler) {
  auto sched = make_manual();
  auto* manual = sched.get();
  ActorSystem system(std::move(sched));
  auto* r = system.spawn<Recorder>();
  check_order_and_deadlines(system, r, true, manual);
}

TEST(Timers, SendAfterNeverFiresEarly) {
  ActorSystem system(make_work_sharing({.workers = 1}));
  auto* r = system.spawn<Recorder>();
  const auto start = Clock::now();
  system.send_after(std::chrono::milliseconds(3), r, Alarm{3});
  system.wait_idle();
  ASSERT_EQ(r->got.size(), 1u);
  EXPECT_GE(r->got[0].second - start, std::chrono::milliseconds(3));
}

TEST(Timers, PendingTimersAreCancelledByStop) {
  ActorSystem system(make_work_sharing({.workers = 1}));
  auto* r = system.spawn<Recorder>();
  system.send_after(std::chrono::hours(1), r, Alarm{1});
  EXPECT_EQ(system.active(), 1);
  system.stop();  // must not wait an hour
  EXPECT_EQ(system.active(), 0);
  EXPECT_TRUE(r->got.empty());
}

// Workers run the timers themselves (driven mode) and with the timers' own thread: the same
// order and the same promise.
TEST(Timers, FireInOrderWithTheTimersOwnThread) {
  ActorSystem system(make_work_sharing({.workers = 2, .drive_timers = false}));
  auto* r = system.spawn<Recorder>();
  check_order_and_deadlines(system, r, false, nullptr);
}

// A worker waiting for a far deadline is woken for an earlier timer set meanwhile, from outside
// the workers and from an actor: the early alarm must not wait for the late one.
class Setter final : public Actor {
 public:
  using Actor::Actor;
  Actor* target = nullptr;

 protected:
  void on_message(Message&) override {
    system().send_after(std::chrono::milliseconds(20), target, Alarm{2});
  }
};

struct SetNow {
  static constexpr std::string_view kName = "test.set_now";
};

TEST(Timers, AnEarlierTimerWakesTheWorkerWaitingForALaterOne) {
  for (const bool from_actor : {false, true}) {
    SCOPED_TRACE(from_actor ? "set by an actor" : "set from outside");
    // One worker: the waiter, with no other parked worker whose safety-net wake-up would find
    // the early timer instead.
    ActorSystem system(make_work_sharing({.workers = 1}));
    auto* r = system.spawn<Recorder>();
    auto* setter = system.spawn<Setter>("setter");
    setter->target = r;
    const auto start = Clock::now();
    const auto late = std::chrono::milliseconds(600);
    system.send_after(late, r, Alarm{1});
    // The worker parks until the late deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (from_actor) {
      ASSERT_TRUE(system.send(setter, SetNow{}).ok());
    } else {
      system.send_after(std::chrono::milliseconds(20), r, Alarm{2});
    }
    system.wait_idle();
    ASSERT_EQ(r->got.size(), 2u);
    EXPECT_EQ(r->got[0].first, 2);
    // Not a timing bound: without the wake-up it arrives with the late one, at 600 ms.
    EXPECT_LT(r->got[0].second - start, late / 2) << "the early alarm waited for the late one";
  }
}

// Counts alarms where the test thread can read them while the system runs.
class Counter final : public Actor {
 public:
  Counter() : Actor("counter") {}
  std::atomic<int> got{0};

 protected:
  void on_message(Message&) override { got.fetch_add(1, std::memory_order_release); }
};

// The seam's stall: the next waiter woken for its deadline stays away kStall, as a thread the
// kernel keeps off its core beside busy ones (there for a tick, 4 ms, at a time).
std::atomic<bool> stall_next{false};
std::atomic<int> stalls_done{0};
constexpr auto kStall = std::chrono::milliseconds(500);
void stall_once() {
  if (!stall_next.exchange(false)) return;
  std::this_thread::sleep_for(kStall);
  stalls_done.fetch_add(1);
}

void wait_for(const std::atomic<int>& n, int want) {
  while (n.load(std::memory_order_acquire) < want) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(Timers, AParkedWorkerFiresTheTimersOfAWaiterKeptOffItsCore) {
  struct Seam {
    Seam() { detail::waiter_woke_for_tests.store(&stall_once); }
    ~Seam() { detail::waiter_woke_for_tests.store(nullptr); }
  } seam;
  auto owned = std::make_unique<detail::WorkSharingScheduler>(WorkSharingOptions{.workers = 2});
  const detail::WorkSharingScheduler& scheduler = *owned;
  ActorSystem system(std::move(owned));
  auto* r = system.spawn<Counter>();
  stalls_done = 0;

  // A waiter running far past its deadline says that the workers share their cores with busy
  // threads (meanwhile the other worker's safety-net wake-up fires the timer). (A slow machine
  // may have said so already, a spinner finding its yield slow: then the other worker backs
  // the waiter up at once.)
  stall_next = true;
  system.send_after(std::chrono::milliseconds(20), r, Alarm{1});
  wait_for(r->got, 1);
  wait_for(stalls_done, 1);
  const std::uint64_t before = scheduler.backup_fires();

  // Then the parked worker backs the waiter up: it wakes shortly after the waiter's deadline
  // and fires the timer the waiter, kept away, has not. The deadline is past the other
  // worker's 50 ms safety net, so that it parks again as the backup while the waiter waits,
  // and half-way between two of its wake-ups, so that it is parked as the backup then.
  stall_next = true;
  system.send_after(std::chrono::milliseconds(225), r, Alarm{2});
  wait_for(r->got, 2);
  EXPECT_EQ(scheduler.backup_fires(), before + 1) << "not fired by the waiter's backup";
  EXPECT_EQ(stalls_done.load(), 1) << "the alarm came only after the waiter's stall";
  wait_for(stalls_done, 2);
  system.wait_idle();
}

// Several threads run the due timers at once (the work-sharing scheduler's workers do, each
// every kTimerCheckEvery resumes, and the waiter's backup beside the waiter): a thread that took
// a later batch must not fire it before the thread that took the earlier one has fired that.
// Each callback spins a little, as a send does, so that a second thread takes the next batch
// while the first is still firing.
TEST(TimerService, ThreadsRunningDueTimersAtOnceFireThemInDeadlineOrder) {
  constexpr int kTimers = 3000;
  TimerService timers(DrivenTimers{});
  std::mutex mu;
  std::vector<int> fired;
  std::atomic<int> count{0};
  const auto base = Clock::now() + std::chrono::milliseconds(5);
  for (int i = 0; i < kTimers; ++i) {
    // Deadlines 1 us apart, several sharing one instant (ties: the order of setting).
    timers.at(base + std::chrono::microseconds(i / 3), [&, i](bool ok) {
      const auto until = Clock::now() + std::chrono::microseconds(2);
      while (Clock::now() < until) {
      }
      std::lock_guard lock(mu);
      if (ok) fired.push_back(i);
      count.fetch_add(1, std::memory_order_release);
    });
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      while (count.load(std::memory_order_acquire) < kTimers) (void)timers.run_due();
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(fired.size(), static_cast<std::size_t>(kTimers));
  int out_of_order = 0;
  for (int i = 0; i < kTimers; ++i) out_of_order += fired[i] != i;
  EXPECT_EQ(out_of_order, 0) << "timers fired out of deadline order";
}

// The same through the scheduler: many alarms due within a millisecond while the timer waiter
// is kept off its core at every wake-up, so that the parked workers back it up and fire beside
// it, and the busy workers look at the timers between resumes.
std::atomic<bool> stall_always{false};
void stall_each_wake() {
  if (stall_always.load()) std::this_thread::sleep_for(std::chrono::microseconds(400));
}

TEST(Timers, AlarmsFiredByTheWaiterAndItsBackupsArriveInDeadlineOrder) {
  struct Seam {
    Seam() {
      stall_always = true;
      detail::waiter_woke_for_tests.store(&stall_each_wake);
    }
    ~Seam() {
      detail::waiter_woke_for_tests.store(nullptr);
      stall_always = false;
    }
  } seam;
  ActorSystem system(make_work_sharing({.workers = 4}));
  auto* r = system.spawn<Recorder>();
  constexpr int kRounds = 20;
  constexpr int kAlarms = 200;
  for (int round = 0; round < kRounds; ++round) {
    r->got.clear();
    const auto start = Clock::now() + std::chrono::milliseconds(20);
    for (int i = 0; i < kAlarms; ++i) {
      system.send_at(start + std::chrono::microseconds(5 * i), r, Alarm{i});
    }
    system.wait_idle();
    ASSERT_EQ(r->got.size(), static_cast<std::size_t>(kAlarms));
    int out_of_order = 0;
    for (int i = 0; i < kAlarms; ++i) out_of_order += r->got[i].first != i;
    ASSERT_EQ(out_of_order, 0) << "round " << round << ": alarms arrived out of deadline order";
  }
}

TEST(TimerService, DrivenRunsDueTimersOnTheCallingThreadAndSaysWhenOneBecomesEarliest) {
  std::vector<Clock::time_point> earliest;
  TimerService timers(DrivenTimers{[&](Clock::time_point d) { earliest.push_back(d); }});
  EXPECT_EQ(timers.next_deadline(), Clock::time_point::max());
  EXPECT_FALSE(timers.run_due());
  const auto base = Clock::now();
  std::vector<int> fired;
  const auto on = [&](int i) {
    return [&fired, i, caller = std::this_thread::get_id()](bool ok) {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      if (ok) fired.push_back(i);
    };
  };
  timers.at(base + std::chrono::hours(2), on(3));
  timers.at(base - std::chrono::milliseconds(2), on(1));  // earlier: said
  timers.at(base + std::chrono::hours(1), on(2));         // not the earliest: not said
  timers.at(base - std::chrono::milliseconds(1), on(0));  // later than the earliest: not said
  ASSERT_EQ(earliest.size(), 2u);
  EXPECT_EQ(earliest[1], base - std::chrono::milliseconds(2));
  EXPECT_EQ(timers.next_deadline(), base - std::chrono::milliseconds(2));
  EXPECT_TRUE(timers.run_due());
  EXPECT_EQ(fired, (std::vector<int>{1, 0}));  // the due ones, earliest first
  EXPECT_EQ(timers.next_deadline(), base + std::chrono::hours(1));
  EXPECT_FALSE(timers.run_due());

  std::vector<bool> cancelled;
  timers.at(base + std::chrono::hours(3), [&](bool ok) { cancelled.push_back(ok); });
  timers.stop();  // pending timers hear so here, on the calling thread
  EXPECT_EQ(cancelled, (std::vector<bool>{false}));
  EXPECT_EQ(timers.next_deadline(), Clock::time_point::max());
  timers.at(base, [&](bool ok) { cancelled.push_back(ok); });  // after stop: at once, cancelled
  EXPECT_EQ(cancelled, (std::vector<bool>{false, false}));
  EXPECT_EQ(fired.size(), 2u);  // 2 and 3 were cancelled by stop, not fired
}

}  // namespace
}  // namespace tandem
