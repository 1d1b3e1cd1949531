// Real-time scheduling: the calling thread and the threads it starts afterwards run under
// SCHED_RR, or the refusal names the policy and the reason. Each case runs on a thread of its
// own so that the test process keeps its policy.
#include "runtime/realtime_scheduling.hpp"

#include <gtest/gtest.h>
#include <sched.h>

#include <stdexcept>
#include <string>
#include <thread>

namespace tandem {
namespace {

TEST(RealtimeScheduling, TheThreadAndThoseItStartsRunRoundRobinOrTheRefusalSaysWhy) {
  int policy = -1;
  int inherited = -1;
  std::string refused;
  std::thread t([&] {
    try {
      use_realtime_scheduling(1);
    } catch (const std::runtime_error& e) {
      refused = e.what();
      return;
    }
    policy = sched_getscheduler(0);
    std::thread inner([&] { inherited = sched_getscheduler(0); });
    inner.join();
  });
  t.join();
  if (!refused.empty()) {
    EXPECT_NE(refused.find("SCHED_RR"), std::string::npos) << refused;
    EXPECT_NE(refused.find("refused"), std::string::npos) << refused;
    GTEST_SKIP() << "this process may not use real-time scheduling: " << refused;
  }
  EXPECT_EQ(policy, SCHED_RR);
  EXPECT_EQ(inherited, SCHED_RR);
}

TEST(RealtimeScheduling, APriorityOutsideTheRangeIsRefusedBeforeAnySystemCall) {
  std::thread t([] {
    EXPECT_THROW(use_realtime_scheduling(0), std::invalid_argument);
    EXPECT_THROW(use_realtime_scheduling(100), std::invalid_argument);
    EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
  });
  t.join();
}

}  // namespace
}  // namespace tandem
