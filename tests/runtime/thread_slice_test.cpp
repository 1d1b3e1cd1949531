// The short scheduler slice of the runtime's threads: asked for, clamped to the kernel's range,
// inherited, and held by the actor workers and the timer thread. Kernels before 6.12 report no
// slice for a normal thread (the cases skip there). Each case runs on a thread of its own so
// that the test process keeps its slice.
#include "runtime/thread_slice.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "runtime/actor_system.hpp"
#include "runtime/scheduler.hpp"
#include "runtime/timer_service.hpp"

namespace tandem {
namespace {

using std::chrono::microseconds;

bool kernel_reports_slices() {
  microseconds seen{};
  std::thread t([&] { seen = thread_slice(); });
  t.join();
  return seen.count() > 0;
}

TEST(ThreadSlice, AskedForInheritedAndClampedToTheKernelsRange) {
  if (!kernel_reports_slices()) GTEST_SKIP() << "this kernel reports no slice (before 6.12)";
  microseconds own{}, inherited{}, clamped_low{}, clamped_high{};
  bool asked = false;
  std::thread t([&] {
    asked = request_thread_slice(microseconds(300));
    own = thread_slice();
    std::thread inner([&] { inherited = thread_slice(); });
    inner.join();
    (void)request_thread_slice(microseconds(10));
    clamped_low = thread_slice();
    (void)request_thread_slice(microseconds(1'000'000));
    clamped_high = thread_slice();
  });
  t.join();
  if (!asked) GTEST_SKIP() << "the system refused sched_setattr";
  EXPECT_EQ(own, microseconds(300));
  EXPECT_EQ(inherited, microseconds(300));
  EXPECT_EQ(clamped_low, microseconds(100));
  EXPECT_EQ(clamped_high, microseconds(100'000));
}

TEST(ThreadSlice, TheTimerThreadRunsWithTheSliceItWasGiven) {
  if (!kernel_reports_slices()) GTEST_SKIP() << "this kernel reports no slice (before 6.12)";
  for (const microseconds slice : {kRuntimeThreadSlice, microseconds(250)}) {
    TimerService timers({}, slice);
    std::promise<microseconds> seen;
    timers.after(std::chrono::nanoseconds(0), [&](bool) { seen.set_value(thread_slice()); });
    EXPECT_EQ(seen.get_future().get(), slice);
  }
}

struct Ask {
  static constexpr std::string_view kName = "test.ask_slice";
};

class SliceReader final : public Actor {
 public:
  using Actor::Actor;
  microseconds seen{};  // read after wait_idle

 protected:
  void on_message(Message&) override { seen = thread_slice(); }
};

TEST(ThreadSlice, ActorWorkersRunWithTheirOptionsSliceOrTheDefault) {
  if (!kernel_reports_slices()) GTEST_SKIP() << "this kernel reports no slice (before 6.12)";
  microseconds system_default{};
  std::thread probe([&] { system_default = thread_slice(); });
  probe.join();
  const auto seen_by_worker = [](WorkSharingOptions options) {
    microseconds seen{};
    std::thread t([&] {  // a thread of its own: the workers inherit its slice
      ActorSystem system(make_work_sharing(options));
      auto* reader = system.spawn<SliceReader>("reader");
      EXPECT_TRUE(system.send(reader, Ask{}).ok());
      system.wait_idle();
      seen = reader->seen;
    });
    t.join();
    return seen;
  };
  EXPECT_EQ(seen_by_worker({.workers = 1}), kRuntimeThreadSlice);
  EXPECT_EQ(seen_by_worker({.workers = 1, .slice = microseconds(400)}), microseconds(400));
  EXPECT_EQ(seen_by_worker({.workers = 1, .slice = microseconds(0)}), system_default);
}

}  // namespace
}  // namespace tandem
