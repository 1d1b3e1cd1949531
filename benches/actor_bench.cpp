// Actor runtime: ping-pong round trip (1 and 2 workers), a ping-pong forced across workers, a
// ping-pong of two busy actors that must run on different workers, fan-in 4 senders -> 1 actor, and
// the inbox's raw enqueue/dequeue throughput.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "benches/json_line_reporter.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/lanes.hpp"
#include "runtime/mailbox.hpp"

namespace tandem {
namespace {

struct Ball {
  static constexpr std::string_view kName = "bench.ball";
  std::uint64_t remaining;
};
struct Go {
  static constexpr std::string_view kName = "bench.go";
  std::uint64_t count;
};
struct Item {
  static constexpr std::string_view kName = "bench.item";
  std::uint64_t value;
};

// The benchmark thread sleeps (futex) rather than spins: a spinning observer would take a
// core from the workers it measures on this 2-core machine.
void wait_for(const std::atomic<bool>& flag) {
  flag.wait(false, std::memory_order_acquire);
}

void raise(std::atomic<bool>* flag) {
  flag->store(true, std::memory_order_release);
  flag->notify_all();
}

class Player final : public Actor {
 public:
  explicit Player(std::atomic<bool>* done) : Actor("player"), done_(done) {}
  Actor* peer = nullptr;

 protected:
  void on_message(Message& m) override {
    const auto left = m.as<Ball>().remaining;
    if (left == 0) {
      raise(done_);
    } else {
      (void)send(peer, Ball{left - 1});
    }
  }

 private:
  std::atomic<bool>* done_;
};

// Plays `round_trips` round trips between two players per iteration; returns the trips.
template <class P>
double play(benchmark::State& state, ActorSystem& system, P* a, P* b, std::atomic<bool>& done,
            std::uint64_t round_trips) {
  a->peer = b;
  b->peer = a;
  for (auto _ : state) {
    done.store(false);
    (void)system.send(a, Ball{2 * round_trips});
    wait_for(done);
  }
  const auto trips = static_cast<double>(state.iterations() * round_trips);
  state.counters["round_trip"] =
      benchmark::Counter(trips, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  return trips;
}

void BM_PingPong(benchmark::State& state) {
  const auto workers = static_cast<std::size_t>(state.range(0));
  ActorSystem system(make_work_sharing({.workers = workers}));
  std::atomic<bool> done{false};
  const double trips =
      play(state, system, system.spawn<Player>(&done), system.spawn<Player>(&done), done, 100'000);
  state.counters["msgs_per_s"] = benchmark::Counter(2 * trips, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PingPong)->ArgName("workers")->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);

// Two pipeline stages in miniature: each handler passes the ball on, then computes for
// `work` (a busy loop, so the core stays taken). On one worker the two run one after the
// other (round trip = 2 x work); on two they overlap (round trip -> work). The counter
// `overlap` is 2 x work / round trip: 1 means serialised, 2 fully parallel.
class BusyPlayer final : public Actor {
 public:
  BusyPlayer(std::atomic<bool>* done, std::chrono::nanoseconds work)
      : Actor("busy-player"), done_(done), work_(work) {}
  Actor* peer = nullptr;

 protected:
  void on_message(Message& m) override {
    const auto left = m.as<Ball>().remaining;
    if (left == 0) {
      raise(done_);
      return;
    }
    (void)send(peer, Ball{left - 1});
    const auto until = std::chrono::steady_clock::now() + work_;
    while (std::chrono::steady_clock::now() < until) {
    }
  }

 private:
  std::atomic<bool>* done_;
  std::chrono::nanoseconds work_;
};

void BM_PingPongBusy(benchmark::State& state) {
  const auto work = std::chrono::microseconds(state.range(0));
  constexpr std::uint64_t kRoundTrips = 2'000;
  ActorSystem system(make_work_sharing({.workers = 2}));
  std::atomic<bool> done{false};
  auto* a = system.spawn<BusyPlayer>(&done, work);
  auto* b = system.spawn<BusyPlayer>(&done, work);
  a->peer = b;
  b->peer = a;
  for (auto _ : state) {
    done.store(false);
    (void)system.send(a, Ball{2 * kRoundTrips});
    wait_for(done);
  }
  const auto trips = static_cast<double>(state.iterations() * kRoundTrips);
  state.counters["round_trip"] =
      benchmark::Counter(trips, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  const double work_s = std::chrono::duration<double>(work).count();
  state.counters["overlap"] = benchmark::Counter(2 * work_s * trips, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PingPongBusy)->ArgName("work_us")->Arg(20)->Arg(200)->UseRealTime()->MinTime(1.0);

// A ping-pong forced across workers: each handler, after passing the ball, keeps its worker
// until the peer has started on the ball (so the peer cannot run on this worker). What a
// hand-off between two busy neighbouring stages costs, next to BM_PingPong's on one worker.
class AcrossPlayer final : public Actor {
 public:
  AcrossPlayer(std::atomic<bool>* done, std::atomic<std::uint64_t>* started)
      : Actor("across-player"), done_(done), started_(started) {}
  Actor* peer = nullptr;

 protected:
  void on_message(Message& m) override {
    const auto left = m.as<Ball>().remaining;
    started_->store(left, std::memory_order_release);
    if (left == 0) {
      raise(done_);
      return;
    }
    (void)send(peer, Ball{left - 1});
    // Bounded: a peer that cannot start (one worker) does not hang the benchmark.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(10);
    while (started_->load(std::memory_order_acquire) == left &&
           std::chrono::steady_clock::now() < until) {
    }
  }

 private:
  std::atomic<bool>* done_;
  std::atomic<std::uint64_t>* started_;
};

void BM_PingPongAcross(benchmark::State& state) {
  ActorSystem system(make_work_sharing({.workers = 2}));
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> started{0};
  play(state, system, system.spawn<AcrossPlayer>(&done, &started),
       system.spawn<AcrossPlayer>(&done, &started), done, 20'000);
}
BENCHMARK(BM_PingPongAcross)->UseRealTime()->MinTime(1.0);

class Sink final : public Actor {
 public:
  Sink(std::uint64_t expected, std::atomic<bool>* done)
      : Actor("sink"), expected_(expected), done_(done) {}
  void reset() { received_ = 0; }

 protected:
  void on_message(Message& m) override {
    sum_ += m.as<Item>().value;
    if (++received_ == expected_) raise(done_);
  }

 private:
  std::uint64_t expected_;
  std::uint64_t received_ = 0;
  std::uint64_t sum_ = 0;
  std::atomic<bool>* done_;
};

class Source final : public Actor {
 public:
  Source(Actor* sink, bool bulk) : Actor("source"), sink_(sink), bulk_(bulk) {}

 protected:
  // Sends in slices of 256 and re-posts itself, so one source never monopolises a worker.
  void on_message(Message& m) override {
    const std::uint64_t left = m.as<Go>().count;
    const std::uint64_t n = std::min<std::uint64_t>(left, 256);
    if (bulk_) {
      std::array<Message, 256> batch;
      for (std::uint64_t i = 0; i < n; ++i) batch[i] = make_message(Item{i});
      (void)system().send_bulk(sink_, batch.data(), n, id());
    } else {
      for (std::uint64_t i = 0; i < n; ++i) (void)send(sink_, Item{i});
    }
    if (left > n) (void)send(this, Go{left - n});
  }

 private:
  Actor* sink_;
  bool bulk_;
};

void fan_in(benchmark::State& state, bool bulk) {
  constexpr int kSenders = 4;
  constexpr std::uint64_t kPerSender = 250'000;
  ActorSystem system(make_work_sharing({.workers = 2}));
  std::atomic<bool> done{false};
  auto* sink = system.spawn<Sink>(kSenders * kPerSender, &done);
  std::vector<Actor*> sources;
  for (int i = 0; i < kSenders; ++i) sources.push_back(system.spawn<Source>(sink, bulk));
  for (auto _ : state) {
    state.PauseTiming();
    system.wait_idle();
    sink->reset();
    done.store(false);
    state.ResumeTiming();
    for (auto* s : sources) (void)system.send(s, Go{kPerSender});
    wait_for(done);
  }
  state.counters["msgs_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kSenders * kPerSender), benchmark::Counter::kIsRate);
}
void BM_FanIn4to1(benchmark::State& state) {
  fan_in(state, false);
}
void BM_FanIn4to1Bulk(benchmark::State& state) {
  fan_in(state, true);
}
BENCHMARK(BM_FanIn4to1)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_FanIn4to1Bulk)->UseRealTime()->MinTime(1.0);

// The inbox alone (runtime/mailbox): one thread pushes messages, then takes them into lanes.
void BM_InboxEnqueueDequeue(benchmark::State& state) {
  Mailbox box;
  Lanes lanes;
  constexpr std::size_t kBatch = 1024;
  for (auto _ : state) {
    for (std::size_t i = 0; i < kBatch; ++i) (void)box.push(make_message(Item{i}));
    std::size_t got = 0;
    while (got < kBatch) got += box.pop_into(&lanes, 16);
    benchmark::DoNotOptimize(lanes);
    lanes.clear();
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_InboxEnqueueDequeue);

// Producer and consumer on two threads.
void BM_InboxTwoThreads(benchmark::State& state) {
  Mailbox box;
  Lanes lanes;
  constexpr std::uint64_t kItems = 1'000'000;
  for (auto _ : state) {
    std::thread producer([&] {
      for (std::uint64_t i = 0; i < kItems; ++i) (void)box.push(make_message(Item{i}));
    });
    std::uint64_t got = 0;
    while (got < kItems) {
      got += box.pop_into(&lanes, 64);
      lanes.clear();
    }
    producer.join();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kItems));
}
BENCHMARK(BM_InboxTwoThreads)->UseRealTime();

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  return tandem::bench::run_benchmarks(argc, argv, "actor");
}
