// The inbox under contention: 4 producers x 1M messages into one actor.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <thread>
#include <vector>

#include "runtime/actor_system.hpp"
#include "runtime/manual_scheduler.hpp"

namespace tandem {
namespace {

struct Seq {
  static constexpr std::string_view kName = "test.seq";
  std::uint32_t producer;
  std::uint64_t seq;
};

constexpr int kProducers = 4;
constexpr std::uint64_t kPerProducer = 1'000'000;

class Checker final : public Actor {
 public:
  Checker() : Actor("checker") {}
  std::array<std::uint64_t, kProducers> next{};
  std::uint64_t out_of_order = 0;
  std::atomic<std::uint64_t> received{0};

 protected:
  void on_message(Message& m) override {
    const Seq s = m.as<Seq>();
    // A gap or a repeat breaks FIFO per producer (and a duplicate or a loss shows here).
    if (s.seq != next[s.producer]) ++out_of_order;
    next[s.producer] = s.seq + 1;
    received.fetch_add(1, std::memory_order_relaxed);
  }
};

TEST(Inbox, FourProducersNoLossNoDuplicateFifoPerProducer) {
  ActorSystem system(make_work_sharing({.workers = 2}));
  auto* checker = system.spawn<Checker>();
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < kPerProducer; ++i) {
        ASSERT_TRUE(system.send(checker, Seq{static_cast<std::uint32_t>(p), i}).ok());
      }
    });
  }
  for (auto& t : producers) t.join();
  system.wait_idle();
  EXPECT_EQ(checker->received.load(), kProducers * kPerProducer);
  EXPECT_EQ(checker->out_of_order, 0u);
  for (int p = 0; p < kProducers; ++p) EXPECT_EQ(checker->next[p], kPerProducer);
}

TEST(Inbox, BulkSendKeepsOrder) {
  auto sched = make_manual();
  auto* manual = sched.get();
  ActorSystem system(std::move(sched));
  auto* checker = system.spawn<Checker>();
  std::vector<Message> batch;
  for (std::uint64_t i = 0; i < 100; ++i) batch.push_back(make_message(Seq{1, i}));
  ASSERT_TRUE(system.send_bulk(checker, batch.data(), batch.size()).ok());
  manual->run_until_idle();
  EXPECT_EQ(checker->received.load(), 100u);
  EXPECT_EQ(checker->next[1], 100u);
  EXPECT_EQ(checker->out_of_order, 0u);
}

}  // namespace
}  // namespace tandem
