// The mailbox on its own: what goes in comes out in order, into the lane its type names.
#include "runtime/mailbox.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "runtime/lanes.hpp"

namespace tandem {
namespace {

struct Forward {
  static constexpr std::string_view kName = "test.mailbox.forward";
  static constexpr Lane kLane = Lane::forward;
  int value;
};

struct Control {
  static constexpr std::string_view kName = "test.mailbox.control";
  int value;
};

TEST(Mailbox, PopsInPushOrderIntoLanes) {
  Mailbox box;
  box.push(make_message(Forward{1}));
  box.push(make_message(Control{2}));
  std::vector<Message> bulk;
  for (int i = 3; i < 8; ++i) bulk.push_back(make_message(Forward{i}));
  box.push_bulk(bulk.data(), bulk.size());
  EXPECT_EQ(box.size_approx(), 7u);

  Lanes lanes;
  EXPECT_EQ(box.pop_into(&lanes, 4), 4u);  // at most `max`
  EXPECT_EQ(box.pop_into(&lanes, 16), 3u);
  EXPECT_EQ(box.pop_into(&lanes, 16), 0u);
  EXPECT_EQ(box.size_approx(), 0u);
  ASSERT_EQ(lanes[Lane::control].size(), 1u);
  EXPECT_EQ(lanes[Lane::control].front().as<Control>().value, 2);
  std::vector<int> forwards;
  for (const Message& m : lanes[Lane::forward]) forwards.push_back(m.as<Forward>().value);
  EXPECT_EQ(forwards, (std::vector<int>{1, 3, 4, 5, 6, 7}));
}

TEST(Mailbox, PopIntoNothingDropsAndCounts) {
  Mailbox box;
  for (int i = 0; i < 5; ++i) box.push(make_message(Forward{i}));
  EXPECT_EQ(box.pop_into(nullptr, 16), 5u);
  EXPECT_EQ(box.size_approx(), 0u);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(Mailbox, PendingAndCountedUntilPopped) {
  Mailbox box;
  EXPECT_FALSE(box.has_pending());
  EXPECT_EQ(box.size_approx(), 0u);
  for (int i = 0; i < 3; ++i) box.push(make_message(Forward{i}));
  EXPECT_TRUE(box.has_pending());
  EXPECT_EQ(box.size_approx(), 3u);
  Lanes lanes;
  EXPECT_EQ(box.pop_into(&lanes, 2), 2u);
  EXPECT_TRUE(box.has_pending());
  EXPECT_EQ(box.size_approx(), 1u);
  EXPECT_EQ(box.pop_into(&lanes, 2), 1u);
  EXPECT_FALSE(box.has_pending());
}

TEST(Mailbox, ClosedRefusesLaterPushesAndKeepsEarlierOnes) {
  Mailbox box;
  EXPECT_TRUE(box.push(make_message(Forward{1})));
  box.close();
  box.close();  // idempotent
  EXPECT_FALSE(box.push(make_message(Forward{2})));
  std::vector<Message> bulk;
  bulk.push_back(make_message(Forward{3}));
  EXPECT_FALSE(box.push_bulk(bulk.data(), bulk.size()));
  EXPECT_TRUE(box.has_pending());
  EXPECT_EQ(box.size_approx(), 1u);
  Lanes lanes;
  EXPECT_EQ(box.pop_into(&lanes, 16), 1u);
  EXPECT_EQ(lanes[Lane::forward].front().as<Forward>().value, 1);
  EXPECT_FALSE(box.has_pending());
}

// Pushes racing a close: each one either was refused or is popped, exactly once.
TEST(Mailbox, APushRacingACloseIsRefusedOrPopped) {
  for (int round = 0; round < 50; ++round) {
    Mailbox box;
    std::atomic<int> accepted{0};
    std::thread producer([&] {
      for (int i = 0; i < 2000; ++i) {
        if (box.push(make_message(Forward{i}))) accepted.fetch_add(1);
      }
    });
    std::this_thread::yield();
    box.close();
    producer.join();
    Lanes lanes;
    int popped = 0;
    while (box.has_pending()) popped += static_cast<int>(box.pop_into(&lanes, 64));
    EXPECT_EQ(popped, accepted.load()) << "round " << round;
  }
}

// A mailbox's first node may be one another mailbox used and gave back, still linked to
// what followed it there.
TEST(Mailbox, ANewMailboxOnReusedNodesStartsEmpty) {
  for (int round = 0; round < 3; ++round) {
    Mailbox box;
    EXPECT_FALSE(box.has_pending()) << "round " << round;
    Lanes lanes;
    EXPECT_EQ(box.pop_into(&lanes, 16), 0u) << "round " << round;
    for (int i = 0; i < 5; ++i) box.push(make_message(Forward{i}));
    EXPECT_EQ(box.pop_into(&lanes, 16), 5u);
  }
}

// Nodes go back to a pool and are reused: many more messages than one batch of nodes, pushed
// by several threads, all arrive once and in each sender's order.
TEST(Mailbox, ThreadsPushingThroughReusedNodesLoseNothing) {
  constexpr int kThreads = 3;
  constexpr int kEach = 20000;
  Mailbox box;
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&box, t] {
      for (int i = 0; i < kEach; ++i) box.push(make_message(Control{t * kEach + i}));
    });
  }
  std::vector<int> last(kThreads, -1);
  int received = 0;
  Lanes lanes;
  while (received < kThreads * kEach) {
    box.pop_into(&lanes, 64);
    auto& q = lanes[Lane::control];
    while (!q.empty()) {
      const int v = q.front().as<Control>().value;
      q.pop_front();
      const int t = v / kEach;
      ASSERT_GT(v % kEach, last[t]) << "thread " << t;
      last[t] = v % kEach;
      ++received;
    }
  }
  for (auto& p : producers) p.join();
  EXPECT_FALSE(box.has_pending());
  EXPECT_EQ(box.pop_into(&lanes, 64), 0u);
}

}  // namespace
}  // namespace tandem
