// Actor semantics: never resumed concurrently with itself, resumed again when messages
// arrive while it runs, errors stop one actor only, sends to stopped actors fail visibly.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/actor_system.hpp"
#include "runtime/manual_scheduler.hpp"

namespace tandem {
namespace {

struct Work {
  static constexpr std::string_view kName = "test.work";
  std::uint64_t value;
};
struct Boom {
  static constexpr std::string_view kName = "test.boom";
};
struct Fwd {
  static constexpr std::string_view kName = "test.fwd";
  static constexpr Lane kLane = Lane::forward;
  int v;
};
struct Go {
  static constexpr std::string_view kName = "test.go";
  int v;
};

class Exclusive final : public Actor {
 public:
  Exclusive() : Actor("exclusive") {}
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<std::uint64_t> handled{0};

 protected:
  void on_message(Message& m) override {
    const int now = inside.fetch_add(1) + 1;
    int prev = max_inside.load();
    while (now > prev && !max_inside.compare_exchange_weak(prev, now)) {
    }
    // A little work so that concurrent resumes, if the scheduler allowed them, would overlap.
    volatile std::uint64_t sink = m.as<Work>().value;
    for (int i = 0; i < 50; ++i) sink = sink * 31 + 7;
    handled.fetch_add(1);
    inside.fetch_sub(1);
  }
};

TEST(Actor, NeverResumedConcurrentlyAndResumedWhenMessagesArriveWhileRunning) {
  ActorSystem system(make_work_sharing({.workers = 2, .budget = 8}));
  auto* a = system.spawn<Exclusive>();
  constexpr int kThreads = 4;
  constexpr std::uint64_t kEach = 200'000;
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&] {
      for (std::uint64_t i = 0; i < kEach; ++i) ASSERT_TRUE(system.send(a, Work{i}).ok());
    });
  }
  for (auto& t : senders) t.join();
  system.wait_idle();
  EXPECT_EQ(a->max_inside.load(), 1);
  EXPECT_EQ(a->handled.load(), kThreads * kEach);
}

// Actors that send to each other from workers: the "run next on this worker" path.
class Relay final : public Actor {
 public:
  explicit Relay(std::string n) : Actor(std::move(n)) {}
  Actor* next_hop = nullptr;
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<std::uint64_t> handled{0};

 protected:
  void on_message(Message& m) override {
    const int now = inside.fetch_add(1) + 1;
    if (now > max_inside.load()) max_inside.store(now);
    handled.fetch_add(1);
    const Work w = m.as<Work>();
    if (w.value > 0) {
      ASSERT_TRUE(send(next_hop, Work{w.value - 1}).ok());
    }
    inside.fetch_sub(1);
  }
};

TEST(Actor, RingOfActorsUnderLoad) {
  ActorSystem system(make_work_sharing({.workers = 2, .budget = 4}));
  std::vector<Relay*> ring;
  for (int i = 0; i < 5; ++i) ring.push_back(system.spawn<Relay>("relay" + std::to_string(i)));
  for (std::size_t i = 0; i < ring.size(); ++i) ring[i]->next_hop = ring[(i + 1) % ring.size()];
  constexpr int kTokens = 20;
  constexpr std::uint64_t kHops = 20'000;
  for (int t = 0; t < kTokens; ++t)
    ASSERT_TRUE(system.send(ring[t % ring.size()], Work{kHops}).ok());
  system.wait_idle();
  std::uint64_t total = 0;
  for (auto* r : ring) {
    EXPECT_EQ(r->max_inside.load(), 1) << r->name();
    total += r->handled.load();
  }
  EXPECT_EQ(total, kTokens * (kHops + 1));
}

class Fragile final : public Actor {
 public:
  explicit Fragile(std::string n) : Actor(std::move(n)) {}
  int handled = 0;
  bool stop_seen = false;

 protected:
  void on_message(Message& m) override {
    if (m.is<Boom>()) throw std::runtime_error("kaboom");
    ++handled;
  }
  void on_stop() override { stop_seen = true; }
};

TEST(Actor, ExceptionStopsOnlyThatActorAndIsReported) {
  auto sched = make_manual();
  auto* manual = sched.get();
  ActorSystem system(std::move(sched));
  std::vector<ActorError> errors;
  system.set_error_handler([&](const ActorError& e) { errors.push_back(e); });
  auto* bad = system.spawn<Fragile>("bad-actor");
  auto* good = system.spawn<Fragile>("good-actor");
  ASSERT_TRUE(system.send(bad, Work{1}).ok());
  ASSERT_TRUE(system.send(bad, Boom{}).ok());
  ASSERT_TRUE(system.send(bad, Work{2}).ok());  // queued behind the failure: a dead letter
  ASSERT_TRUE(system.send(good, Work{1}).ok());
  manual->run_until_idle();

  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].actor, "bad-actor");
  EXPECT_EQ(errors[0].message_type, "test.boom");
  EXPECT_EQ(errors[0].what, "kaboom");
  EXPECT_TRUE(bad->stopped());
  EXPECT_TRUE(bad->stop_seen);
  EXPECT_EQ(bad->handled, 1);
  EXPECT_EQ(system.dead_letters(), 1u);

  // The rest keeps running.
  EXPECT_EQ(good->handled, 1);
  ASSERT_TRUE(system.send(good, Work{2}).ok());
  manual->run_until_idle();
  EXPECT_EQ(good->handled, 2);

  // Sending to the stopped actor is an error the sender sees.
  const SendResult r = system.send(bad, Work{3});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status, SendStatus::target_stopped);
  EXPECT_EQ(to_string(r.status), "target actor stopped");
}

TEST(Actor, SendAfterSystemStopFails) {
  ActorSystem system(make_manual());
  auto* a = system.spawn<Fragile>("a");
  system.stop();
  EXPECT_EQ(system.send(a, Work{1}).status, SendStatus::system_stopped);
  EXPECT_EQ(system.send(nullptr, Work{1}).status, SendStatus::no_target);
}

// An actor whose policy holds forward messages until a control message "opens" it: messages
// wait in their lane while others are handled, whatever the arrival order.
class Gate final : public Actor {
 public:
  Gate() : Actor("gate") {}
  std::vector<int> order;
  bool open = false;

 protected:
  bool handle_next(Lanes& lanes) override {
    auto& ctl = lanes[Lane::control];
    if (!ctl.empty()) {
      Message m = std::move(ctl.front());
      ctl.pop_front();
      dispatch(m);
      return true;
    }
    auto& fwd = lanes[Lane::forward];
    if (open && !fwd.empty()) {
      Message m = std::move(fwd.front());
      fwd.pop_front();
      dispatch(m);
      return true;
    }
    return false;
  }
  void on_message(Message& m) override {
    if (m.is<Go>()) {
      open = true;
      order.push_back(-m.as<Go>().v);
    } else {
      order.push_back(m.as<Fwd>().v);
    }
  }
};

TEST(Actor, MessagesWaitInTheirLaneUntilThePolicyTakesThem) {
  auto sched = make_manual();
  auto* manual = sched.get();
  ActorSystem system(std::move(sched));
  auto* gate = system.spawn<Gate>();
  ASSERT_TRUE(system.send(gate, Fwd{1}).ok());
  ASSERT_TRUE(system.send(gate, Fwd{2}).ok());
  manual->run_until_idle();
  EXPECT_TRUE(gate->order.empty());
  EXPECT_EQ(system.active(), 0);  // waiting for input is idle, not busy
  ASSERT_TRUE(system.send(gate, Go{7}).ok());
  manual->run_until_idle();
  EXPECT_EQ(gate->order, (std::vector<int>{-7, 1, 2}));
}

TEST(Actor, ManualSchedulerRunsOneMessagePerResume) {
  auto sched = make_manual();
  auto* manual = sched.get();
  ActorSystem system(std::move(sched));
  auto* a = system.spawn<Fragile>("a");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(system.send(a, Work{1}).ok());
  EXPECT_EQ(manual->ready_count(), 1u);  // scheduled once, not three times
  EXPECT_TRUE(manual->run_one());
  EXPECT_EQ(a->handled, 1);
  EXPECT_EQ(manual->run_until_idle(), 2u);
  EXPECT_EQ(a->handled, 3);
  EXPECT_FALSE(manual->run_one());
}

// Exceptions from handle_next overrides, on_stop and the error handler: the actor stops,
// the error is reported with the actor's name, and neither the worker nor the manual
// scheduler's loop is taken down.
class BadPolicy final : public Actor {
 public:
  BadPolicy() : Actor("bad-policy") {}

 protected:
  bool handle_next(Lanes&) override { throw std::runtime_error("no such action"); }
  void on_message(Message&) override {}
};

class BadStop final : public Actor {
 public:
  BadStop() : Actor("bad-stop") {}
  int handled = 0;

 protected:
  void on_message(Message&) override {
    ++handled;
    stop_self();
  }
  void on_stop() override { throw std::runtime_error("cleanup failed"); }
};

TEST(Actor, ExceptionFromHandleNextStopsTheActorAndIsReported) {
  auto sched = make_manual();
  auto* manual = sched.get();
  ActorSystem system(std::move(sched));
  std::vector<ActorError> errors;
  system.set_error_handler([&](const ActorError& e) { errors.push_back(e); });
  auto* bad = system.spawn<BadPolicy>();
  ASSERT_TRUE(system.send(bad, Work{1}).ok());
  ASSERT_TRUE(system.send(bad, Work{2}).ok());
  EXPECT_NO_THROW(manual->run_until_idle());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].actor, "bad-policy");
  EXPECT_EQ(errors[0].what, "no such action");
  EXPECT_TRUE(bad->stopped());
  EXPECT_EQ(manual->ready_count(), 0u);
  EXPECT_EQ(system.active(), 0);
  EXPECT_EQ(system.dead_letters(), 2u);
  EXPECT_EQ(system.send(bad, Work{3}).status, SendStatus::target_stopped);
}

TEST(Actor, ExceptionFromOnStopIsReported) {
  auto sched = make_manual();
  auto* manual = sched.get();
  ActorSystem system(std::move(sched));
  std::vector<ActorError> errors;
  system.set_error_handler([&](const ActorError& e) { errors.push_back(e); });
  auto* a = system.spawn<BadStop>();
  ASSERT_TRUE(system.send(a, Work{1}).ok());
  EXPECT_NO_THROW(manual->run_until_idle());
  EXPECT_EQ(a->handled, 1);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].actor, "bad-stop");
  EXPECT_EQ(errors[0].what, "cleanup failed");
  EXPECT_EQ(system.active(), 0);
}

TEST(Actor, ThrowingErrorHandlerIsNotFatal) {
  auto sched = make_manual();
  auto* manual = sched.get();
  ActorSystem system(std::move(sched));
  system.set_error_handler([](const ActorError&) { throw std::runtime_error("handler bug"); });
  auto* bad = system.spawn<Fragile>("bad");
  auto* good = system.spawn<Fragile>("good");
  ASSERT_TRUE(system.send(bad, Boom{}).ok());
  EXPECT_NO_THROW(manual->run_until_idle());
  EXPECT_TRUE(bad->stopped());
  EXPECT_TRUE(bad->stop_seen);
  EXPECT_EQ(system.error_count(), 1u);
  EXPECT_EQ(manual->ready_count(), 0u);
  ASSERT_TRUE(system.send(good, Work{1}).ok());
  manual->run_until_idle();
  EXPECT_EQ(good->handled, 1);
}

TEST(Actor, ExceptionsOnWorkersLeaveTheWorkersRunning) {
  ActorSystem system(make_work_sharing({.workers = 1}));
  std::atomic<int> reported{0};
  system.set_error_handler([&](const ActorError&) {
    reported.fetch_add(1);
    throw std::runtime_error("handler bug");
  });
  auto* policy = system.spawn<BadPolicy>();
  auto* stopper = system.spawn<BadStop>();
  auto* fragile = system.spawn<Fragile>("fragile");
  auto* good = system.spawn<Exclusive>();
  ASSERT_TRUE(system.send(policy, Work{1}).ok());
  ASSERT_TRUE(system.send(stopper, Work{1}).ok());
  ASSERT_TRUE(system.send(fragile, Boom{}).ok());
  system.wait_idle();
  EXPECT_EQ(reported.load(), 3);
  // The only worker survived all three.
  ASSERT_TRUE(system.send(good, Work{1}).ok());
  system.wait_idle();
  EXPECT_EQ(good->handled.load(), 1u);
}

// Sends racing the target's own stop: every send told "ok" is handled, every other one is
// told target_stopped; nothing is both, nothing is lost.
struct Numbered {
  static constexpr std::string_view kName = "test.numbered";
  std::uint32_t sender;
  std::uint32_t seq;
};

class StopsItself final : public Actor {
 public:
  StopsItself(std::size_t senders, std::size_t each, std::size_t stop_after)
      : Actor("stops-itself"),
        seen(senders, std::vector<std::uint8_t>(each, 0)),
        stop_after_(stop_after) {}
  std::vector<std::vector<std::uint8_t>> seen;  // times each message was handled
  std::atomic<bool> stop_ran{false};

 protected:
  void on_message(Message& m) override {
    const Numbered n = m.as<Numbered>();
    ++seen[n.sender][n.seq];
    if (++handled_ == stop_after_) stop_self();
  }
  void on_stop() override { stop_ran.store(true); }

 private:
  std::size_t stop_after_;
  std::size_t handled_ = 0;
};

TEST(Actor, SendsRacingTheTargetsStopAreEitherHandledOrRefused) {
  constexpr std::size_t kSenders = 4;
  constexpr std::size_t kEach = 20'000;
  ActorSystem system(make_work_sharing({.workers = 2}));
  auto* target = system.spawn<StopsItself>(kSenders, kEach, kSenders * kEach / 2);
  std::vector<std::vector<SendStatus>> results(kSenders, std::vector<SendStatus>(kEach));
  std::vector<std::thread> senders;
  for (std::uint32_t t = 0; t < kSenders; ++t) {
    senders.emplace_back([&, t] {
      for (std::uint32_t i = 0; i < kEach; ++i) {
        results[t][i] = system.send(target, Numbered{t, i}).status;
      }
    });
  }
  for (auto& th : senders) th.join();
  system.wait_idle();
  EXPECT_TRUE(target->stopped());
  EXPECT_TRUE(target->stop_ran.load());
  std::size_t ok = 0;
  std::size_t refused = 0;
  std::size_t wrong = 0;
  for (std::size_t t = 0; t < kSenders; ++t) {
    for (std::size_t i = 0; i < kEach; ++i) {
      if (results[t][i] == SendStatus::ok) {
        ++ok;
        if (target->seen[t][i] != 1) ++wrong;  // told ok: handled exactly once
      } else {
        ++refused;
        if (results[t][i] != SendStatus::target_stopped || target->seen[t][i] != 0) ++wrong;
      }
    }
  }
  EXPECT_EQ(wrong, 0u) << ok << " ok, " << refused << " refused";
  EXPECT_GE(ok, kSenders * kEach / 2);
  EXPECT_EQ(system.dead_letters(), 0u);
}

TEST(Message, TypedBodyRoundTripAndTypeCheck) {
  const Message m = make_message(Work{42});
  EXPECT_TRUE(m.is<Work>());
  EXPECT_FALSE(m.is<Boom>());
  EXPECT_EQ(m.as<Work>().value, 42u);
  EXPECT_EQ(m.lane(), Lane::control);
  EXPECT_EQ(make_message(Fwd{1}).lane(), Lane::forward);
  EXPECT_THROW((void)m.as<Fwd>(), std::logic_error);
  EXPECT_EQ(message_type_name(m.type()), "test.work");
  const std::string_view unknown = message_type_name(0x1234);
  EXPECT_EQ(unknown, "<unknown type 0x1234>");
  EXPECT_EQ(message_type_name(0x1234).data(), unknown.data());  // remembered, not rebuilt
}

}  // namespace
}  // namespace tandem
