// Stress of the sender/actor hand-off (the scheduled flag, the per-worker `next` slot and its
// stealing, the shared queue, parking): actors in a ring pass tokens while outside threads
// send numbered messages, every actor resumed for one message at a time, so that actors go
// idle and are woken again (a hand-off) on nearly every message. Checks that no two threads
// are ever inside one actor, and that every message is handled exactly once.
//
// The default run makes about 2 * 10^6 hand-offs (seconds, also under the sanitizers). The
// full stress is 10^8 or more, labelled `stress`:
//   TANDEM_STRESS_HANDOFFS=100000000 ctest --test-dir build -L stress
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "runtime/actor_system.hpp"

namespace tandem {
namespace {

struct Hop {
  static constexpr std::string_view kName = "test.stress.hop";
  std::uint64_t left;
};
struct Numbered {
  static constexpr std::string_view kName = "test.stress.numbered";
  std::uint32_t sender;
  std::uint32_t seq;
};

std::uint64_t handoffs_wanted() {
  if (const char* s = std::getenv("TANDEM_STRESS_HANDOFFS")) return std::strtoull(s, nullptr, 10);
  return 2'000'000;
}

class Node final : public Actor {
 public:
  Node(std::string n, std::size_t senders) : Actor(std::move(n)), sum_(senders), count_(senders) {}
  Actor* next = nullptr;
  std::atomic<int> violations{0};

  // Read after wait_idle(). Plain fields on purpose: were the actor ever run on two threads at
  // once, ThreadSanitizer would report the race and the counts would come out wrong.
  std::uint64_t hops = 0;
  std::vector<std::uint64_t> sum_;
  std::vector<std::uint64_t> count_;

 protected:
  void on_message(Message& m) override {
    if (inside_.exchange(true, std::memory_order_acq_rel)) violations.fetch_add(1);
    if (m.is<Hop>()) {
      ++hops;
      const std::uint64_t left = m.as<Hop>().left;
      if (left > 0 && !send(next, Hop{left - 1}).ok()) violations.fetch_add(1);
    } else {
      const Numbered n = m.as<Numbered>();
      sum_[n.sender] += n.seq;
      ++count_[n.sender];
    }
    inside_.store(false, std::memory_order_release);
  }

 private:
  std::atomic<bool> inside_{false};
};

TEST(HandoffStress, NoDoubleRunNoLossNoDuplicate) {
  constexpr std::size_t kNodes = 4;
  constexpr std::size_t kTokens = 3;
  constexpr std::size_t kSenders = 2;
  const std::uint64_t total = handoffs_wanted();
  // Half the messages are ring hops (actor to actor: the `next` slot), half come from outside.
  const std::uint64_t hops_per_token = total / 2 / kTokens;
  const std::uint32_t per_sender = static_cast<std::uint32_t>(total / 2 / kSenders);

  ActorSystem system(make_work_sharing({.workers = 2, .budget = 1}));
  std::vector<Node*> nodes;
  for (std::size_t i = 0; i < kNodes; ++i) {
    nodes.push_back(system.spawn<Node>("node" + std::to_string(i), kSenders));
  }
  for (std::size_t i = 0; i < kNodes; ++i) nodes[i]->next = nodes[(i + 1) % kNodes];
  for (std::size_t t = 0; t < kTokens; ++t) {
    ASSERT_TRUE(system.send(nodes[t], Hop{hops_per_token - 1}).ok());
  }
  std::vector<std::thread> senders;
  for (std::uint32_t s = 0; s < kSenders; ++s) {
    senders.emplace_back([&, s] {
      for (std::uint32_t i = 0; i < per_sender; ++i) {
        if (!system.send(nodes[(i + s) % kNodes], Numbered{s, i}).ok()) std::abort();
        // Now and then let the node drain, so that it goes idle and is woken again.
        if ((i & 255) == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& t : senders) t.join();
  system.wait_idle();

  std::uint64_t hops = 0;
  for (std::uint32_t s = 0; s < kSenders; ++s) {
    std::uint64_t sum = 0;
    std::uint64_t count = 0;
    for (auto* n : nodes) {
      sum += n->sum_[s];
      count += n->count_[s];
    }
    EXPECT_EQ(count, per_sender) << "sender " << s;
    EXPECT_EQ(sum, std::uint64_t{per_sender} * (per_sender - 1) / 2) << "sender " << s;
  }
  for (auto* n : nodes) {
    EXPECT_EQ(n->violations.load(), 0) << n->name();
    hops += n->hops;
  }
  EXPECT_EQ(hops, kTokens * hops_per_token);
  EXPECT_EQ(system.dead_letters(), 0u);
}

}  // namespace
}  // namespace tandem
