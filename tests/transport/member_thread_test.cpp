// The thread under GlooCollectives and NcclCollectives, with a library of its own that records
// what it was asked: the order of rounds, a failed round and what follows it, and a stop with
// rounds still queued. Every wait has a generous deadline.
#include "transport/member_thread.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;

// Something the test opens once, that a round waits for.
class Gate {
 public:
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 20s, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A library that records its calls; `behaviour` (by default nothing) is each round's reduction.
class Recorder final : public MemberThread::Rounds {
 public:
  std::function<void(MemberRound&, std::string&)> behaviour = [](MemberRound&, std::string&) {};

  void reduce(MemberRound& round, std::string& step) override {
    {
      std::lock_guard lock(mu_);
      reduced_.push_back(round.round);
      threads_.push_back(std::this_thread::get_id());
    }
    behaviour(round, step);
  }
  void failed() override {
    note([&] { ++failed_; });
  }
  void stopped() override {
    note([&] { ++stopped_; });
  }

  std::function<void()> done(std::int64_t round) {
    return [this, round] { note([&] { done_.push_back(round); }); };
  }
  std::function<void(const std::string&)> on_error() {
    return [this](const std::string& message) { note([&] { errors_.push_back(message); }); };
  }
  // Waits until `ready` holds (under the recorder's lock); false after the deadline.
  bool wait_until(const std::function<bool()>& ready) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 20s, ready);
  }

  std::vector<std::int64_t> reduced() { return read(reduced_); }
  std::vector<std::int64_t> done_rounds() { return read(done_); }
  std::vector<std::string> errors() { return read(errors_); }
  std::vector<std::thread::id> threads() { return read(threads_); }
  int failed_calls() { return read(failed_); }
  int stopped_calls() { return read(stopped_); }
  std::size_t done_count_locked() const { return done_.size(); }
  std::size_t error_count_locked() const { return errors_.size(); }

 private:
  template <class F>
  void note(F f) {
    std::lock_guard lock(mu_);
    f();
    cv_.notify_all();
  }
  template <class T>
  T read(const T& value) {
    std::lock_guard lock(mu_);
    return value;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::int64_t> reduced_;
  std::vector<std::int64_t> done_;
  std::vector<std::string> errors_;
  std::vector<std::thread::id> threads_;
  int failed_ = 0;
  int stopped_ = 0;
};

const std::vector<Endpoint> kGroup = {4, 7};

MemberRound round_of(Recorder& recorder, std::int64_t round) {
  return {round, {}, true, Reduction::sum, recorder.done(round)};
}

TEST(MemberThread, RunsRoundsOneAtATimeInTheOrderQueuedOnItsOwnThread) {
  Recorder recorder;
  int in_progress = 0;
  bool overlapped = false;
  recorder.behaviour = [&](MemberRound&, std::string&) {
    overlapped = overlapped || ++in_progress > 1;
    std::this_thread::yield();
    --in_progress;
  };
  MemberThread thread("Test", kGroup, 7, recorder, recorder.on_error());
  std::vector<std::int64_t> expected;
  for (std::int64_t r = 0; r < 200; ++r) {
    EXPECT_FALSE(thread.submit(round_of(recorder, r)));
    expected.push_back(r);
  }
  ASSERT_TRUE(recorder.wait_until([&] { return recorder.done_count_locked() == 200; }));
  EXPECT_EQ(recorder.reduced(), expected);
  EXPECT_EQ(recorder.done_rounds(), expected);
  EXPECT_FALSE(overlapped);
  for (const std::thread::id id : recorder.threads()) {
    EXPECT_NE(id, std::this_thread::get_id());
    EXPECT_EQ(id, recorder.threads().front());
  }
  EXPECT_TRUE(recorder.errors().empty());
  EXPECT_EQ(recorder.failed_calls(), 0);
}

TEST(MemberThread, AFailedRoundIsReportedOnceDropsTheQueuedOnesAndRefusesLaterOnes) {
  Recorder recorder;
  Gate gate;
  recorder.behaviour = [&](MemberRound& round, std::string& step) {
    if (round.round != 2) return;
    step = "reducing";
    gate.wait();
    throw std::runtime_error("peer lost");
  };
  const std::string expected =
      "Test all-reduce round 2 among {4,7} as endpoint 7: reducing failed: peer lost";
  {
    MemberThread thread("Test", kGroup, 7, recorder, recorder.on_error());
    for (std::int64_t r = 1; r <= 3; ++r) EXPECT_FALSE(thread.submit(round_of(recorder, r)));
    ASSERT_TRUE(recorder.wait_until([&] { return recorder.done_count_locked() == 1; }));
    gate.open();
    ASSERT_TRUE(recorder.wait_until([&] { return recorder.error_count_locked() == 1; }));
    EXPECT_EQ(thread.submit(round_of(recorder, 4)), expected);
  }
  EXPECT_EQ(recorder.errors(), std::vector<std::string>{expected});
  EXPECT_EQ(recorder.reduced(), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(recorder.done_rounds(), std::vector<std::int64_t>{1});
  EXPECT_EQ(recorder.failed_calls(), 1);
  EXPECT_EQ(recorder.stopped_calls(), 1);
}

TEST(MemberThread, ARoundFailingBeforeItNamesAStepFailsConnectingAndAThrowingDoneCompleting) {
  Recorder recorder;
  recorder.behaviour = [](MemberRound&, std::string&) { throw std::runtime_error("no peer"); };
  {
    MemberThread thread("Test", {7}, 7, recorder, recorder.on_error());
    EXPECT_FALSE(thread.submit(round_of(recorder, 0)));
    ASSERT_TRUE(recorder.wait_until([&] { return recorder.error_count_locked() == 1; }));
  }
  EXPECT_EQ(recorder.errors().front(),
            "Test all-reduce round 0 among {7} as endpoint 7: connecting failed: no peer");

  Recorder completing;
  {
    MemberThread thread("Test", {7}, 7, completing, completing.on_error());
    EXPECT_FALSE(thread.submit(
        {5, {}, true, Reduction::mean, [] { throw std::runtime_error("caller gone"); }}));
    ASSERT_TRUE(completing.wait_until([&] { return completing.error_count_locked() == 1; }));
  }
  EXPECT_EQ(completing.errors().front(),
            "Test all-reduce round 5 among {7} as endpoint 7: completing failed: caller gone");
}

TEST(MemberThread, StopLetsTheRoundInProgressFinishAndDropsTheQueuedOnes) {
  Recorder recorder;
  Gate started;
  Gate gate;
  recorder.behaviour = [&](MemberRound&, std::string&) {
    started.open();
    gate.wait();
  };
  MemberThread thread("Test", kGroup, 4, recorder, recorder.on_error());
  for (std::int64_t r = 1; r <= 3; ++r) EXPECT_FALSE(thread.submit(round_of(recorder, r)));
  ASSERT_TRUE(started.wait());
  thread.stop();  // returns at once, round 1 still in progress
  EXPECT_TRUE(recorder.done_rounds().empty());
  gate.open();
  thread.join();
  EXPECT_EQ(recorder.reduced(), std::vector<std::int64_t>{1});
  EXPECT_EQ(recorder.done_rounds(), std::vector<std::int64_t>{1});
  EXPECT_TRUE(recorder.errors().empty());
  EXPECT_EQ(recorder.failed_calls(), 0);
  EXPECT_EQ(recorder.stopped_calls(), 1);
}

TEST(MemberThread, RoundTextNamesTheLibraryRoundGroupAndMember) {
  EXPECT_EQ(round_text("Gloo", kGroup, 4, 12),
            "Gloo all-reduce round 12 among {4,7} as endpoint 4");
}

}  // namespace
}  // namespace tandem::transport
