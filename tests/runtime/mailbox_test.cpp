// The mailbox on its own: what goes in comes out in order, into the lane its type names.
#include "runtime/mailbox.hpp"

#include <gtest/gtest.h>

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
