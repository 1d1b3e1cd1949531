// Threads shared among actor systems (runtime/thread_budget.hpp): two systems of two workers
// each, sharing one thread, never run two handlers at once, and both finish everything. No
// timing assertions: the handlers count how many of them run at the same moment.
#include "runtime/thread_budget.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/actor_system.hpp"

namespace tandem {
namespace {

struct Work {
  static constexpr std::string_view kName = "test.budget.work";
  int n;
};

// Counts the handlers running across every system at once, and the most there ever were.
struct Overlap {
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  std::atomic<int> handled{0};
};

// Keeps its core busy for about `d` (no sleep: a sleeping handler would hide an overlap less).
void busy_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  volatile std::uint64_t sink = 0;
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 100; ++i) sink = sink * 31 + 7;
  }
}

class Worker final : public Actor {
 public:
  Worker(std::string n, Overlap* overlap) : Actor(std::move(n)), overlap_(overlap) {}

 protected:
  void on_message(Message&) override {
    const int now = overlap_->running.fetch_add(1) + 1;
    int most = overlap_->most.load();
    while (now > most && !overlap_->most.compare_exchange_weak(most, now)) {
    }
    busy_for(std::chrono::microseconds(200));
    overlap_->running.fetch_sub(1);
    overlap_->handled.fetch_add(1);
  }

 private:
  Overlap* overlap_;
};

// Fills `system` with `actors` actors of `messages` messages each.
std::vector<Worker*> load(ActorSystem& system, Overlap& overlap, int actors, int messages) {
  std::vector<Worker*> out;
  for (int a = 0; a < actors; ++a) {
    std::string name = "w";
    name += std::to_string(a);
    out.push_back(system.spawn<Worker>(name, &overlap));
  }
  for (int m = 0; m < messages; ++m) {
    for (Worker* w : out) EXPECT_TRUE(system.send(w, Work{m}).ok());
  }
  return out;
}

// Two systems of two workers each, sharing a budget of `size` threads, each with 3 actors of
// 40 messages: the most handlers that ran at once across both, after checking all ran.
int most_at_once(const std::shared_ptr<ThreadBudget>& budget) {
  Overlap overlap;
  ActorSystem a(make_work_sharing({.workers = 2, .shared_threads = budget}));
  ActorSystem b(make_work_sharing({.workers = 2, .shared_threads = budget}));
  load(a, overlap, 3, 40);
  load(b, overlap, 3, 40);
  a.wait_idle();
  b.wait_idle();
  EXPECT_EQ(overlap.handled.load(), 2 * 3 * 40);
  return overlap.most.load();
}

TEST(ThreadBudget, TwoSystemsSharingOneThreadNeverRunTwoHandlersAtOnce) {
  auto budget = std::make_shared<ThreadBudget>(1);
  EXPECT_EQ(most_at_once(budget), 1);
  EXPECT_EQ(budget->peak(), 1u);
}

TEST(ThreadBudget, TwoSystemsSharingTwoThreadsUseNoMore) {
  auto budget = std::make_shared<ThreadBudget>(2);
  EXPECT_LE(most_at_once(budget), 2);
  EXPECT_LE(budget->peak(), 2u);
}

TEST(ThreadBudget, ASizeOfZeroIsRefused) {
  EXPECT_THROW(ThreadBudget(0), std::invalid_argument);
}

}  // namespace
}  // namespace tandem
