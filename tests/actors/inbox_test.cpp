// A stage's received tensors (actors/inbox): put by key, has and take by an action's routes
// (pieces joined in sample order), what is missing named, duplicates and gaps refused.
#include "actors/inbox.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace tandem::actors {
namespace {

using schedules::Action;
using schedules::Op;
using schedules::Port;
using schedules::Route;

Tensor rows_from(std::int64_t first, std::int64_t n) {
  std::vector<float> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(static_cast<float>(first + i));
  return Tensor::from_vector(v, {n, 1});
}

Route route(Port port, int device, std::int64_t begin, std::int64_t end) {
  Route r;
  r.port = port;
  r.device = device;
  r.samples = {begin, end};
  return r;
}

// B of minibatch 3, samples [0, 4), chunk 1: a gradient in two pieces from d2 and d5, and an
// activation from d0.
struct Case {
  Action a;
  std::vector<Route> routes;
  Case() {
    a.op = Op::B;
    a.minibatch = 3;
    a.slice = {0, 4};
    a.chunk = 1;
    routes = {route(Port::activation, 0, 0, 4), route(Port::gradient, 2, 0, 1),
              route(Port::gradient, 5, 1, 4)};
  }
};

TEST(Inbox, TakesTheRoutedPiecesJoinedInSampleOrder) {
  const Case c;
  Inbox inbox;
  EXPECT_FALSE(inbox.has(c.a, c.routes));
  ASSERT_TRUE(inbox.put(Port::gradient, 1, 3, 1, 4, rows_from(1, 3), 0));
  ASSERT_TRUE(inbox.put(Port::gradient, 1, 3, 0, 1, rows_from(0, 1), 0));
  EXPECT_EQ(inbox.missing(c.a, c.routes), "activation [0,4) from d0");
  ASSERT_TRUE(inbox.put(Port::activation, 1, 3, 0, 4, rows_from(10, 4), 7));
  // Another minibatch or chunk is another key.
  ASSERT_TRUE(inbox.put(Port::gradient, 0, 3, 0, 1, rows_from(0, 1), 0));
  EXPECT_TRUE(inbox.has(c.a, c.routes));
  EXPECT_EQ(inbox.missing(c.a, c.routes), "");
  EXPECT_EQ(inbox.size(), 4u);
  EXPECT_EQ(inbox.peak(), 4u);

  std::uint32_t rows_total = 0;
  const Tensor g = inbox.take(c.a, c.routes, Port::gradient, nullptr);
  EXPECT_EQ(g.to_float_vector(), (std::vector<float>{0, 1, 2, 3}));
  const Tensor x = inbox.take(c.a, c.routes, Port::activation, &rows_total);
  EXPECT_EQ(x.to_float_vector(), (std::vector<float>{10, 11, 12, 13}));
  EXPECT_EQ(rows_total, 7u);
  EXPECT_FALSE(inbox.take(c.a, c.routes, Port::target, nullptr).defined());
  EXPECT_EQ(inbox.size(), 1u);
  EXPECT_FALSE(inbox.has(c.a, c.routes));
}

TEST(Inbox, RefusesDuplicatesGapsAndWhatHasNotArrived) {
  const Case c;
  Inbox inbox;
  ASSERT_TRUE(inbox.put(Port::gradient, 1, 3, 0, 1, rows_from(0, 1), 0));
  EXPECT_FALSE(inbox.put(Port::gradient, 1, 3, 0, 1, rows_from(0, 1), 0));
  EXPECT_THROW((void)inbox.take(c.a, c.routes, Port::gradient, nullptr), std::logic_error);
  // Routes that leave a gap in the slice.
  Inbox gap;
  ASSERT_TRUE(gap.put(Port::gradient, 1, 3, 0, 1, rows_from(0, 1), 0));
  ASSERT_TRUE(gap.put(Port::gradient, 1, 3, 2, 4, rows_from(2, 2), 0));
  const std::vector<Route> holed{route(Port::gradient, 2, 0, 1), route(Port::gradient, 5, 2, 4)};
  EXPECT_THROW((void)gap.take(c.a, holed, Port::gradient, nullptr), std::logic_error);
  EXPECT_EQ(Inbox().missing(c.a, {route(Port::input, schedules::kLoader, 0, 4)}),
            "input [0,4) from the loader");
}

}  // namespace
}  // namespace tandem::actors
