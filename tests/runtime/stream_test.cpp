// Stream and Event on the cpu: order within a stream, events, wait() across streams,
// on_complete's thread, draining on destruction, failures. Gates (promises the test opens)
// hold work back, so every "not yet" below is certain, never a matter of timing.
#include "runtime/stream.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/detail/progress_thread.hpp"
#include "runtime/event.hpp"
#include "runtime/tensor.hpp"
#include "tests/runtime/error_of.hpp"

namespace tandem {
namespace {

// Work that blocks its stream until open() is called.
class Gate {
 public:
  Gate() : opened_(promise_.get_future().share()) {}
  std::function<void()> work() {
    return [f = opened_] { f.wait(); };
  }
  void open() { promise_.set_value(); }

 private:
  std::promise<void> promise_;
  std::shared_future<void> opened_;
};

using test::error_of;

TEST(Stream, WorkRunsInEnqueueOrder) {
  Stream stream(Device::cpu());
  EXPECT_EQ(stream.device(), Device::cpu());
  EXPECT_EQ(stream.native_handle(), nullptr);
  std::vector<int> seen;  // touched by the stream's worker only until synchronize()
  for (int i = 0; i < 1000; ++i) stream.enqueue([&seen, i] { seen.push_back(i); });
  stream.synchronize();
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], i);
}

TEST(Stream, EventCompletesAfterEarlierWorkOnly) {
  Stream stream(Device::cpu());
  std::atomic<int> ran{0};
  stream.enqueue([&] { ran = 1; });
  const Event before = stream.record();
  Gate gate;
  stream.enqueue(gate.work());
  stream.enqueue([&] { ran = 2; });
  const Event after = stream.record();

  // `before` does not wait for the gated work enqueued after it.
  before.synchronize();
  EXPECT_TRUE(before.query());
  EXPECT_EQ(ran.load(), 1);
  EXPECT_FALSE(after.query());  // held by the closed gate

  gate.open();
  after.synchronize();
  EXPECT_TRUE(after.query());
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(after.error(), nullptr);
  EXPECT_EQ(after.device(), Device::cpu());
}

TEST(Stream, WaitOrdersWorkAcrossStreams) {
  Stream producer(Device::cpu());
  Stream consumer(Device::cpu());
  Gate gate;
  std::atomic<int> value{0};
  producer.enqueue(gate.work());
  producer.enqueue([&] { value = 42; });
  const Event produced = producer.record();

  int observed = -1;
  consumer.wait(produced);  // returns at once: the gate is still closed
  consumer.enqueue([&] { observed = value.load(); });
  const Event consumed = consumer.record();
  EXPECT_FALSE(consumed.query());

  gate.open();
  consumed.synchronize();
  EXPECT_EQ(observed, 42);
}

TEST(Stream, WaitOnUnrecordedEventIsNoOp) {
  Stream stream(Device::cpu());
  stream.wait(Event());
  std::atomic<bool> ran{false};
  stream.enqueue([&] { ran = true; });
  stream.synchronize();
  EXPECT_TRUE(ran.load());
}

TEST(Event, OnCompleteRunsOnTheProgressThread) {
  Stream stream(Device::cpu());
  Gate gate;
  stream.enqueue(gate.work());
  const Event event = stream.record();

  std::promise<std::thread::id> pending;
  std::promise<bool> pending_on_progress;
  event.on_complete([&] {
    pending_on_progress.set_value(detail::on_progress_thread());
    pending.set_value(std::this_thread::get_id());
  });
  gate.open();
  const std::thread::id pending_thread = pending.get_future().get();
  EXPECT_NE(pending_thread, std::this_thread::get_id());
  EXPECT_TRUE(pending_on_progress.get_future().get());

  // Registered after completion: still not run on the caller's thread.
  event.synchronize();
  std::promise<std::thread::id> late;
  event.on_complete([&] { late.set_value(std::this_thread::get_id()); });
  EXPECT_NE(late.get_future().get(), std::this_thread::get_id());
}

TEST(Event, DefaultEventIsComplete) {
  const Event event;
  EXPECT_FALSE(event.recorded());
  EXPECT_TRUE(event.query());
  event.synchronize();
  EXPECT_EQ(event.error(), nullptr);
  std::promise<std::thread::id> ran;
  event.on_complete([&] { ran.set_value(std::this_thread::get_id()); });
  EXPECT_NE(ran.get_future().get(), std::this_thread::get_id());
}

// The sleep below only bounds the elapsed time from below (sleep_for never returns early); no
// assertion depends on how fast the machine is.
TEST(Event, TimedEventsSayWhenTheStreamReachedThem) {
  using namespace std::chrono_literals;
  Stream stream(Device::cpu());
  Gate gate;
  stream.enqueue(gate.work());
  const auto before = std::chrono::steady_clock::now();
  const Event start = stream.record_timed();
  stream.enqueue([] { std::this_thread::sleep_for(20ms); });
  const Event end = stream.record();  // every cpu event keeps its time
  EXPECT_FALSE(start.completed_at().has_value()) << "pending: no time yet";
  EXPECT_FALSE(end.elapsed_since(start).has_value());
  gate.open();
  end.synchronize();
  const auto after = std::chrono::steady_clock::now();
  ASSERT_TRUE(start.completed_at().has_value());
  ASSERT_TRUE(end.completed_at().has_value());
  EXPECT_LE(before, *start.completed_at());
  EXPECT_LE(*start.completed_at(), *end.completed_at());
  EXPECT_LE(*end.completed_at(), after);
  const std::optional<std::chrono::nanoseconds> took = end.elapsed_since(start);
  ASSERT_TRUE(took.has_value());
  EXPECT_GE(*took, 20ms);
  EXPECT_EQ(*took, *end.completed_at() - *start.completed_at());
  EXPECT_FALSE(Event().completed_at().has_value()) << "never recorded";
  EXPECT_FALSE(end.elapsed_since(Event()).has_value());
}

TEST(Stream, DestructionDrainsPendingWork) {
  std::atomic<int> count{0};
  Event last;
  std::promise<void> callback_ran;
  {
    Stream stream(Device::cpu());
    Gate gate;
    stream.enqueue(gate.work());
    for (int i = 0; i < 100; ++i) stream.enqueue([&] { ++count; });
    last = stream.record();
    last.on_complete([&] { callback_ran.set_value(); });
    gate.open();
  }  // the last handle: runs the 100 increments and the record, then joins the worker
  EXPECT_EQ(count.load(), 100);
  EXPECT_TRUE(last.query());
  callback_ran.get_future().get();
}

TEST(Stream, CopiesShareOneQueue) {
  Stream a(Device::cpu());
  Stream b = a;  // a handle: the same queue
  std::vector<int> seen;
  a.enqueue([&] { seen.push_back(1); });
  b.enqueue([&] { seen.push_back(2); });
  a.synchronize();
  EXPECT_EQ(seen, (std::vector<int>{1, 2}));
}

TEST(Stream, FailedWorkSkipsLaterWorkAndFailsLaterEvents) {
  Stream stream(Device::cpu());
  const Event ok = stream.record();
  std::atomic<bool> later_ran{false};
  stream.enqueue([] { throw std::runtime_error("kernel blew up"); });
  stream.enqueue([&] { later_ran = true; });
  const Event failed = stream.record();

  EXPECT_NE(error_of([&] { failed.synchronize(); }).find("kernel blew up"), std::string::npos);
  EXPECT_TRUE(failed.query());
  EXPECT_NE(failed.error(), nullptr);
  EXPECT_FALSE(later_ran.load());
  EXPECT_EQ(ok.error(), nullptr);

  // A stream that waits on the failed event fails too: its work depended on the failed work.
  Stream other(Device::cpu());
  other.wait(failed);
  std::atomic<bool> dependent_ran{false};
  other.enqueue([&] { dependent_ran = true; });
  const Event other_event = other.record();
  EXPECT_NE(error_of([&] { other_event.synchronize(); }).find("kernel blew up"), std::string::npos);
  EXPECT_FALSE(dependent_ran.load());
}

TEST(Stream, RefusesSimAndMissingCuda) {
  EXPECT_NE(error_of([] { Stream s(Device::sim()); }).find("sim"), std::string::npos);
  EXPECT_NE(error_of([] {
              Stream s(Device::cpu());
              s.enqueue(nullptr);
            }).find("empty"),
            std::string::npos);
  const int count = cuda_device_count();
  const Device missing = Device::cuda(count);
  EXPECT_NE(error_of([&] { Stream s(missing); }).find(missing.str()), std::string::npos);
}

TEST(Stream, TensorCopyAndZeroOnACpuStream) {
  Stream stream(Device::cpu());
  Tensor dst = Tensor::zeros({4});
  {
    const Tensor src = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
    dst.copy_from(src, stream);
  }  // src's last handle is gone; the queued copy keeps its storage
  stream.synchronize();
  EXPECT_EQ(dst.to_float_vector(), (std::vector<float>{1, 2, 3, 4}));
  dst.set_zero(stream);
  stream.synchronize();
  EXPECT_EQ(dst.to_float_vector(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_NE(error_of([&] { dst.copy_from(Tensor::zeros({5}), stream); }).find("does not match"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem
