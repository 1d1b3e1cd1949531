// The in-process channel and collectives the stage actors send and reduce through.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "runtime/actor_system.hpp"
#include "runtime/manual_scheduler.hpp"
#include "transport/local_channel.hpp"
#include "transport/local_collectives.hpp"

namespace tandem::transport {
namespace {

struct Note {
  static constexpr std::string_view kName = "test.note";
  int v;
};

class Sink final : public Actor {
 public:
  using Actor::Actor;
  std::vector<Message> got;

 protected:
  void on_message(Message& m) override { got.push_back(std::move(m)); }
};

TEST(LocalChannel, HandsTensorsOverWithTheirTag) {
  ActorSystem system(make_manual());
  auto* a = system.spawn<Sink>("a");
  auto* b = system.spawn<Sink>("b");
  LocalChannel channel(system);
  channel.bind(0, a);
  channel.bind(1, b);
  Tensor t = Tensor::full({3}, 2.0f);
  Tag tag;
  tag.minibatch = 4;
  tag.begin = 2;
  tag.end = 5;
  ASSERT_TRUE(channel.send(0, 1, make_message(Note{7}, {t}, tag)).ok());
  system.wait_idle();
  ASSERT_EQ(b->got.size(), 1u);
  EXPECT_EQ(b->got[0].tag(), tag);
  EXPECT_EQ(b->got[0].env.source, a->id());
  EXPECT_TRUE(b->got[0].tensors.at(0).shares_storage(t));  // a handle, no copy
  EXPECT_THROW((void)channel.send(0, 5, make_message(Note{1})), std::out_of_range);
}

TEST(LocalCollectives, SumsMeansAndSkipsNonContributors) {
  LocalCollectives c;
  const std::vector<Endpoint> group{3, 4, 5};
  std::vector<Tensor> t = {Tensor::full({2}, 1.0f), Tensor::full({2}, 3.0f),
                           Tensor::full({2}, 100.0f)};
  std::atomic<int> done{0};
  // Mean over the two contributors; the third takes part and receives the result.
  c.all_reduce(group, 5, 0, {t[2]}, false, Reduction::mean, [&] { ++done; });
  c.all_reduce(group, 3, 0, {t[0]}, true, Reduction::mean, [&] { ++done; });
  EXPECT_EQ(done.load(), 0);  // nobody completes before everyone arrived
  c.all_reduce(group, 4, 0, {t[1]}, true, Reduction::mean, [&] { ++done; });
  EXPECT_EQ(done.load(), 3);
  for (const Tensor& x : t) EXPECT_EQ(x.to_float_vector(), (std::vector<float>{2.0f, 2.0f}));
  // Sum, from threads.
  std::vector<Tensor> u = {Tensor::full({1}, 1.0f), Tensor::full({1}, 2.0f),
                           Tensor::full({1}, 4.0f)};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      c.all_reduce(group, group[i], 1, {u[i]}, true, Reduction::sum, [&] { ++done; });
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(done.load(), 6);
  for (const Tensor& x : u) EXPECT_EQ(x.to_float_vector(), (std::vector<float>{7.0f}));
}

TEST(LocalCollectives, RejectsStrangersAndDoubleArrivals) {
  LocalCollectives c;
  const std::vector<Endpoint> group{0, 1};
  EXPECT_THROW(c.all_reduce(group, 2, 0, {}, true, Reduction::sum, [] {}), std::invalid_argument);
  c.all_reduce(group, 0, 0, {Tensor::zeros({1})}, true, Reduction::sum, [] {});
  EXPECT_THROW(c.all_reduce(group, 0, 0, {Tensor::zeros({1})}, true, Reduction::sum, [] {}),
               std::logic_error);
}

}  // namespace
}  // namespace tandem::transport
