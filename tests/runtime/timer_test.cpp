// Timers fire in deadline order and never early.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "runtime/actor_system.hpp"
#include "runtime/manual_scheduler.hpp"

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

}  // namespace
}  // namespace tandem
