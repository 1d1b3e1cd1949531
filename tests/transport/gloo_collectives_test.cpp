// Gloo's collectives on the control plane, with ranks as threads of one process over 127.0.0.1:
// each rank has its own Rendezvous and GlooCollectives, as a process would. Results are checked
// against LocalCollectives on the same inputs. Every wait has a timeout, so a failure shows as
// an error, never as a hang; no test asserts on timing.
#include "transport/gloo_collectives.hpp"

#include <gloo/common/error.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/local_collectives.hpp"
#include "transport/rendezvous_store.hpp"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;

constexpr std::chrono::milliseconds kLong = 20s;

RendezvousOptions options(int rank, int world, std::uint16_t port) {
  RendezvousOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master_host = world > 1 ? "127.0.0.1" : "";
  o.master_port = port;
  o.job_token = "gloo-test";
  o.host_name = "host-" + std::to_string(rank);
  // Far above the interval: a loaded machine (sanitizers, parallel tests) must not lose a rank.
  o.heartbeat_interval = 100ms;
  o.heartbeat_timeout = 5000ms;
  return o;
}

// Runs fn(rank) on a thread per rank; returns each rank's exception message, "" when none.
std::vector<std::string> run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t i = 0; i < errors.size(); ++i) EXPECT_EQ(errors[i], "") << "rank " << i;
}

void expect_contains(const std::string& text, std::string_view part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << text << "' lacks '" << part << "'";
}

// A joined world of `world` ranks; shut down in order (rank 0 last) when it goes.
class World {
 public:
  explicit World(int world) : rv_(static_cast<std::size_t>(world)) {
    rv_[0] = std::make_unique<Rendezvous>(options(0, world, 0));
    for (int r = 1; r < world; ++r) {
      rv_[static_cast<std::size_t>(r)] =
          std::make_unique<Rendezvous>(options(r, world, rv_[0]->port()));
    }
    expect_no_errors(run_ranks(world, [&](int r) { at(r).join(kLong); }));
  }
  ~World() {
    expect_no_errors(run_ranks(size(), [&](int r) { at(r).shutdown(kLong); }));
  }
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  int size() const { return static_cast<int>(rv_.size()); }
  Rendezvous& at(int rank) { return *rv_[static_cast<std::size_t>(rank)]; }

 private:
  std::vector<std::unique_ptr<Rendezvous>> rv_;
};

// Collects completions (`done`) and failures (`on_error`). The callbacks share the state, so
// a reduction that completes after a failed assertion ended the test early touches no freed
// memory.
class Events {
 public:
  std::function<void()> done() {
    return [s = state_] {
      std::lock_guard lock(s->mu);
      ++s->done;
      s->cv.notify_all();
    };
  }
  std::function<void(const std::string&)> on_error() {
    return [s = state_](const std::string& message) {
      std::lock_guard lock(s->mu);
      s->errors.push_back(message);
      s->cv.notify_all();
    };
  }
  // True once `n` completions arrived (false after kLong, or at the first error).
  bool wait_done(int n) {
    std::unique_lock lock(state_->mu);
    state_->cv.wait_for(lock, kLong, [&] { return state_->done >= n || !state_->errors.empty(); });
    return state_->done >= n;
  }
  // The errors once there are `n` (or after kLong).
  std::vector<std::string> wait_errors(std::size_t n) {
    std::unique_lock lock(state_->mu);
    state_->cv.wait_for(lock, kLong, [&] { return state_->errors.size() >= n; });
    return state_->errors;
  }
  int done_count() const {
    std::lock_guard lock(state_->mu);
    return state_->done;
  }
  std::vector<std::string> errors() const {
    std::lock_guard lock(state_->mu);
    return state_->errors;
  }
  std::string first_error() const {
    const std::vector<std::string> e = errors();
    return e.empty() ? "no error (timed out)" : e.front();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    std::vector<std::string> errors;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

// One GlooCollectives per rank of `world`, on loopback.
std::vector<std::unique_ptr<GlooCollectives>> collectives(World& world, Events& events,
                                                          std::chrono::milliseconds timeout = kLong,
                                                          const std::string& prefix = "gloo") {
  std::vector<std::unique_ptr<GlooCollectives>> c;
  for (int r = 0; r < world.size(); ++r) {
    GlooCollectivesOptions o;
    o.hostname = "127.0.0.1";
    o.timeout = timeout;
    o.key_prefix = prefix;
    o.on_error = events.on_error();
    c.push_back(std::make_unique<GlooCollectives>(world.at(r), o));
  }
  return c;
}

using Tensors = std::vector<Tensor>;

// Shapes of one call: matrices, a scalar, an empty tensor, and one past Gloo's 1 MiB segment.
const std::vector<Shape> kShapes = {{3, 5}, {}, {7}, {0}, {300000}};

// Random values; `dyadic`: multiples of 1/16 below 2^10, whose sums are exact in any order.
Tensors inputs(std::uint32_t seed, bool dyadic) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> real(-10.0f, 10.0f);
  std::uniform_int_distribution<int> whole(-16000, 16000);
  Tensors out;
  for (const Shape& s : kShapes) {
    Tensor t = Tensor::zeros(s);
    float* p = t.data<float>();
    for (std::int64_t k = 0; k < t.numel(); ++k) {
      p[k] = dyadic ? static_cast<float>(whole(rng)) / 16.0f : real(rng);
    }
    out.push_back(t);
  }
  return out;
}

Tensors clones(const Tensors& t) {
  Tensors out;
  for (const Tensor& x : t) out.push_back(x.clone());
  return out;
}

// What LocalCollectives makes of the same inputs: every member's result.
std::vector<Tensors> reference(const std::vector<Endpoint>& group, const std::vector<Tensors>& in,
                               const std::vector<bool>& contributes, Reduction op) {
  LocalCollectives local;
  std::vector<Tensors> out;
  for (const Tensors& t : in) out.push_back(clones(t));
  for (std::size_t i = 0; i < group.size(); ++i) {
    local.all_reduce(group, group[i], 0, out[i], contributes[i], op, [] {});
  }
  return out;
}

// The values of a CPU f32 tensor, read in place (Tensor::to_float_vector passes memcpy a null
// pointer for an empty tensor, which UBSan reports).
std::vector<float> values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

std::vector<std::uint32_t> bits(const Tensor& t) {
  std::vector<std::uint32_t> out;
  for (const float x : values(t)) out.push_back(std::bit_cast<std::uint32_t>(x));
  return out;
}

void expect_bitwise_equal(const Tensors& got, const Tensors& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(bits(got[i]), bits(want[i])) << what << ", tensor " << i;
  }
}

// Each element within 1e-6 of the magnitudes that were added up (the members' order of
// addition differs between Gloo's ring and LocalCollectives).
void expect_close(const Tensors& got, const Tensors& want, const std::vector<Tensors>& in,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::vector<float> g = values(got[i]);
    const std::vector<float> w = values(want[i]);
    ASSERT_EQ(g.size(), w.size()) << what << ", tensor " << i;
    for (std::size_t k = 0; k < g.size(); ++k) {
      float magnitude = 0.0f;
      for (const Tensors& m : in) magnitude += std::fabs(m[i].data<float>()[k]);
      ASSERT_NEAR(g[k], w[k], 1e-6f * magnitude) << what << ", tensor " << i << "[" << k << "]";
    }
  }
}

struct Round {
  std::vector<bool> contributes;
  Reduction op;
};

// Runs `rounds`, numbered from `first_round`, on `group`, whose member i lives in coll[i], with
// inputs seeded by round and member; all are queued at once, from this thread, as all_reduce
// never blocks. Checks every member's result against LocalCollectives': bit for bit when
// `exact`, else within a tolerance and bit for bit among the members.
void check_rounds(std::vector<std::unique_ptr<GlooCollectives>>& coll,
                  const std::vector<Endpoint>& group, std::int64_t first_round,
                  const std::vector<Round>& rounds, bool dyadic, bool exact) {
  Events events;
  std::vector<std::vector<Tensors>> in(rounds.size()), got(rounds.size());
  for (std::size_t r = 0; r < rounds.size(); ++r) {
    for (std::size_t m = 0; m < group.size(); ++m) {
      in[r].push_back(inputs(static_cast<std::uint32_t>(1000 * r + 10 * m + 1), dyadic));
      got[r].push_back(clones(in[r][m]));
    }
  }
  for (std::size_t r = 0; r < rounds.size(); ++r) {
    for (std::size_t m = 0; m < group.size(); ++m) {
      coll[m]->all_reduce(group, group[m], first_round + static_cast<std::int64_t>(r), got[r][m],
                          rounds[r].contributes[m], rounds[r].op, events.done());
    }
  }
  ASSERT_TRUE(events.wait_done(static_cast<int>(rounds.size() * group.size())))
      << events.first_error();
  for (std::size_t r = 0; r < rounds.size(); ++r) {
    const std::vector<Tensors> want = reference(group, in[r], rounds[r].contributes, rounds[r].op);
    for (std::size_t m = 0; m < group.size(); ++m) {
      const std::string what = "round " + std::to_string(r) + ", member " + std::to_string(m);
      if (exact) {
        expect_bitwise_equal(got[r][m], want[m], what);
      } else {
        expect_close(got[r][m], want[m], in[r], what);
        expect_bitwise_equal(got[r][m], got[r][0], what + " against member 0");
      }
    }
  }
}

const std::vector<Round> kTwoMemberRounds = {
    {{true, true}, Reduction::sum},    {{true, true}, Reduction::mean},
    {{true, false}, Reduction::mean},  {{false, true}, Reduction::sum},
    {{false, false}, Reduction::mean}, {{true, true}, Reduction::mean},
};

TEST(GlooCollectives, TwoRanksEqualLocalCollectivesBitForBit) {
  World world(2);
  Events events;
  auto coll = collectives(world, events);
  // Endpoints need not be ranks: the group's order makes the Gloo ranks.
  check_rounds(coll, {11, 4}, 0, kTwoMemberRounds, /*dyadic=*/false, /*exact=*/true);
  // Another GlooCollectives on the same job, after these, connects anew under its own prefix.
  coll.clear();
  auto again = collectives(world, events, kLong, "gloo-again");
  check_rounds(again, {11, 4}, 0, kTwoMemberRounds, /*dyadic=*/false, /*exact=*/true);
  EXPECT_TRUE(events.errors().empty());
}

TEST(GlooCollectives, FourRanksEqualLocalCollectives) {
  World world(4);
  Events events;
  auto coll = collectives(world, events);
  const std::vector<Round> rounds = {
      {{true, true, true, true}, Reduction::sum},
      {{true, true, true, true}, Reduction::mean},
      {{true, false, true, false}, Reduction::mean},
      {{false, false, false, true}, Reduction::mean},
      {{false, false, false, false}, Reduction::sum},
      {{false, true, true, true}, Reduction::sum},
  };
  // Sums of multiples of 1/16 are exact in any order: bit for bit.
  check_rounds(coll, {0, 1, 2, 3}, 0, rounds, /*dyadic=*/true, /*exact=*/true);
  // Arbitrary floats: Gloo's ring adds the members in another order than LocalCollectives
  // (member order), so within a tolerance; yet every member gets the very same bits.
  check_rounds(coll, {0, 1, 2, 3}, 100, rounds, /*dyadic=*/false, /*exact=*/false);
  EXPECT_TRUE(events.errors().empty());
}

TEST(GlooCollectives, TwoGroupsReduceAtOnce) {
  World world(4);
  Events events;
  auto coll = collectives(world, events);
  // Group {0, 1} lives in ranks 0 and 1, group {2, 3} in ranks 2 and 3; both run their rounds
  // at the same time, with the same round numbers.
  std::thread ta([&] {
    std::vector<std::unique_ptr<GlooCollectives>> mine;
    mine.push_back(std::move(coll[0]));
    mine.push_back(std::move(coll[1]));
    check_rounds(mine, {0, 1}, 0, kTwoMemberRounds, /*dyadic=*/false, /*exact=*/true);
  });
  std::thread tb([&] {
    std::vector<std::unique_ptr<GlooCollectives>> mine;
    mine.push_back(std::move(coll[2]));
    mine.push_back(std::move(coll[3]));
    std::vector<Round> rounds = kTwoMemberRounds;
    for (Round& r : rounds) r.op = r.op == Reduction::sum ? Reduction::mean : Reduction::sum;
    check_rounds(mine, {2, 3}, 0, rounds, /*dyadic=*/false, /*exact=*/true);
  });
  ta.join();
  tb.join();
  EXPECT_TRUE(events.errors().empty());
}

TEST(GlooCollectives, AProcessMayHostSeveralMembersOfAGroup) {
  World world(2);
  Events events;
  auto coll = collectives(world, events);
  // Endpoints 5 and 7 live in rank 0, endpoint 6 in rank 1.
  std::vector<GlooCollectives*> hosts = {coll[0].get(), coll[1].get(), coll[0].get()};
  const std::vector<Endpoint> group = {5, 6, 7};
  std::vector<Tensors> in, got;
  for (int m = 0; m < 3; ++m) {
    in.push_back(inputs(static_cast<std::uint32_t>(77 + m), /*dyadic=*/true));
    got.push_back(clones(in.back()));
  }
  const std::vector<bool> contributes = {true, false, true};
  for (std::size_t m = 0; m < 3; ++m) {
    hosts[m]->all_reduce(group, group[m], 0, got[m], contributes[m], Reduction::mean,
                         events.done());
  }
  ASSERT_TRUE(events.wait_done(3)) << events.first_error();
  const std::vector<Tensors> want = reference(group, in, contributes, Reduction::mean);
  for (std::size_t m = 0; m < 3; ++m) {
    expect_bitwise_equal(got[m], want[m], "member " + std::to_string(m));
  }
}

TEST(GlooCollectives, SimTensorsMoveTheirSizeAndAGroupOfOneNeedsNoPeer) {
  World world(2);
  Events events;
  auto coll = collectives(world, events);
  // Round 0: 64 bytes; round 1: 12 MiB, more than one call's 4 MiB. Each member hands Gloo
  // the two counters (8 bytes) and the tensors' size in zeros, as real gradients would cost.
  const std::vector<Shape> shapes = {{4, 4}, {3, 1 << 20}};
  for (std::int64_t round = 0; round < 2; ++round) {
    for (int r = 0; r < 2; ++r) {
      coll[static_cast<std::size_t>(r)]->all_reduce(
          std::vector<Endpoint>{0, 1}, r, round,
          {Tensor::zeros(shapes[static_cast<std::size_t>(round)], DType::f32, Device::sim())},
          r == 0, Reduction::mean, events.done());
    }
  }
  ASSERT_TRUE(events.wait_done(4)) << events.first_error();
  for (const auto& c : coll) EXPECT_EQ(c->reduced_bytes(), 2u * 8u + 64u + (12u << 20));
  // A group of one: the member's own values, or zeros when it did not contribute (as
  // LocalCollectives).
  Tensor own = Tensor::full({3}, 2.5f);
  Tensor none = Tensor::full({3}, 2.5f);
  coll[1]->all_reduce(std::vector<Endpoint>{9}, 9, 0, {own}, true, Reduction::mean, events.done());
  coll[1]->all_reduce(std::vector<Endpoint>{9}, 9, 1, {none}, false, Reduction::mean,
                      events.done());
  ASSERT_TRUE(events.wait_done(6)) << events.first_error();
  EXPECT_EQ(own.to_float_vector(), (std::vector<float>{2.5f, 2.5f, 2.5f}));
  EXPECT_EQ(none.to_float_vector(), (std::vector<float>{0.0f, 0.0f, 0.0f}));
  EXPECT_TRUE(events.errors().empty());
}

TEST(GlooCollectives, RejectsStrangersRepeatedMembersAndOtherTensorsAtTheCall) {
  World world(1);
  Events events;
  auto coll = collectives(world, events);
  GlooCollectives& c = *coll[0];
  const std::vector<Endpoint> group = {0, 1};
  const auto call = [&](const std::vector<Endpoint>& g, Endpoint m, Tensors t) {
    c.all_reduce(g, m, 0, std::move(t), true, Reduction::sum, events.done());
  };
  try {
    call(group, 2, {Tensor::zeros({1})});
    ADD_FAILURE() << "a stranger was accepted";
  } catch (const std::invalid_argument& e) {
    expect_contains(e.what(), "round 0 among {0,1}");
    expect_contains(e.what(), "endpoint 2 is not a member");
  }
  EXPECT_THROW(call({0, 1, 0}, 0, {Tensor::zeros({1})}), std::invalid_argument);
  EXPECT_THROW(call(group, 0, {Tensor::zeros({1}, DType::i32)}), std::invalid_argument);
  EXPECT_THROW(call(group, 0, {Tensor::zeros({1}, DType::bf16)}), std::invalid_argument);
  EXPECT_THROW(call(group, 0, {Tensor()}), std::invalid_argument);
  try {
    call(group, 0, {Tensor::zeros({1}), Tensor::zeros({1}, DType::f32, Device::sim())});
    ADD_FAILURE() << "a sim tensor among CPU tensors was accepted";
  } catch (const std::invalid_argument& e) {
    expect_contains(e.what(), "tensor 1 is f32[1] sim");
  }
  EXPECT_EQ(events.done_count(), 0);
  EXPECT_TRUE(events.errors().empty());
}

TEST(GlooCollectives, AMemberThatNeverComesFailsTheRoundNamingItAndNothingHangs) {
  World world(2);
  Events events;
  auto coll = collectives(world, events, 1000ms);
  Tensor t = Tensor::full({4}, 1.0f);
  coll[0]->all_reduce(std::vector<Endpoint>{0, 1}, 0, 3, {t}, true, Reduction::sum, events.done());
  const std::vector<std::string> errors = events.wait_errors(1);
  ASSERT_EQ(errors.size(), 1u);
  expect_contains(errors[0], "round 3 among {0,1} as endpoint 0");
  expect_contains(errors[0], "connecting failed");
  expect_contains(errors[0], "'gloo/0,1/1'");  // the store key endpoint 1 never set
  EXPECT_EQ(events.done_count(), 0);
  // The failure is reported to the member's next call, on the caller's thread.
  try {
    coll[0]->all_reduce(std::vector<Endpoint>{0, 1}, 0, 4, {t}, true, Reduction::sum,
                        events.done());
    ADD_FAILURE() << "a failed member took another reduction";
  } catch (const GlooCollectivesError& e) {
    EXPECT_EQ(std::string(e.what()), errors[0]);
  }
}

TEST(GlooCollectives, ARoundOneMemberSkipsTimesOutNamingTheRound) {
  World world(2);
  Events events;
  // Long enough for round 0 to connect and complete on a loaded machine.
  auto coll = collectives(world, events, 3000ms);
  std::vector<Tensor> t = {Tensor::full({4}, 1.0f), Tensor::full({4}, 2.0f)};
  for (int r = 0; r < 2; ++r) {
    coll[static_cast<std::size_t>(r)]->all_reduce(std::vector<Endpoint>{0, 1}, r, 0,
                                                  {t[static_cast<std::size_t>(r)]}, true,
                                                  Reduction::sum, events.done());
  }
  ASSERT_TRUE(events.wait_done(2)) << events.first_error();
  EXPECT_EQ(t[0].to_float_vector(), (std::vector<float>{3.0f, 3.0f, 3.0f, 3.0f}));
  // Connected now; endpoint 1 skips round 1.
  coll[0]->all_reduce(std::vector<Endpoint>{0, 1}, 0, 1, {t[0]}, true, Reduction::sum,
                      events.done());
  const std::vector<std::string> errors = events.wait_errors(1);
  ASSERT_EQ(errors.size(), 1u);
  expect_contains(errors[0], "round 1 among {0,1} as endpoint 0");
  expect_contains(errors[0], "reducing failed");
  EXPECT_EQ(events.done_count(), 2);
}

TEST(GlooCollectives, MembersThatDisagreeOnTheReductionBothFail) {
  World world(2);
  Events events;
  auto coll = collectives(world, events);
  for (int r = 0; r < 2; ++r) {
    coll[static_cast<std::size_t>(r)]->all_reduce(
        std::vector<Endpoint>{0, 1}, r, 0, {Tensor::full({2}, 1.0f)}, true,
        r == 0 ? Reduction::sum : Reduction::mean, events.done());
  }
  const std::vector<std::string> errors = events.wait_errors(2);
  ASSERT_EQ(errors.size(), 2u);
  for (const std::string& e : errors) expect_contains(e, "members disagree on the reduction");
  EXPECT_EQ(events.done_count(), 0);
}

// As collectives(), with tensors of at least `in_place_bytes` reduced in place.
std::vector<std::unique_ptr<GlooCollectives>> collectives_in_place(World& world, Events& events,
                                                                   std::size_t in_place_bytes,
                                                                   const std::string& prefix) {
  std::vector<std::unique_ptr<GlooCollectives>> c;
  for (int r = 0; r < world.size(); ++r) {
    GlooCollectivesOptions o;
    o.hostname = "127.0.0.1";
    o.timeout = kLong;
    o.key_prefix = prefix;
    o.in_place_bytes = in_place_bytes;
    o.on_error = events.on_error();
    c.push_back(std::make_unique<GlooCollectives>(world.at(r), o));
  }
  return c;
}

TEST(GlooCollectives, TensorsReducedInPlaceAmongPackedOnesEqualLocalCollectives) {
  World two(2);
  World four(4);
  Events events;
  const std::vector<Round> four_rounds = {
      {{true, true, true, true}, Reduction::mean},
      {{true, false, true, false}, Reduction::mean},
      {{false, false, false, true}, Reduction::sum},
      {{false, false, false, false}, Reduction::mean},
  };
  // 32 bytes: kShapes' {3, 5} and {300000} in place, the scalar, {7} and the empty one packed
  // around them; 0: every non-empty tensor in place, only the counters packed.
  for (const std::size_t bytes : {std::size_t{32}, std::size_t{0}}) {
    const std::string prefix = "in-place-" + std::to_string(bytes);
    auto c2 = collectives_in_place(two, events, bytes, prefix);
    check_rounds(c2, {11, 4}, 0, kTwoMemberRounds, /*dyadic=*/false, /*exact=*/true);
    auto c4 = collectives_in_place(four, events, bytes, prefix);
    check_rounds(c4, {0, 1, 2, 3}, 0, four_rounds, /*dyadic=*/true, /*exact=*/true);
    check_rounds(c4, {0, 1, 2, 3}, 100, four_rounds, /*dyadic=*/false, /*exact=*/false);
  }
  EXPECT_TRUE(events.errors().empty());
}

TEST(GlooCollectives, AOneTensorRoundAboveTheDefaultThresholdEqualsLocalCollectives) {
  World world(2);
  Events events;
  auto coll = collectives(world, events);
  ASSERT_GE(std::size_t{(1 << 20) + 3} * sizeof(float), GlooCollectivesOptions{}.in_place_bytes);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> real(-10.0f, 10.0f);
  const std::vector<Endpoint> group = {0, 1};
  const std::vector<Round> rounds = {{{true, true}, Reduction::mean},
                                     {{false, true}, Reduction::mean},
                                     {{true, false}, Reduction::sum}};
  for (std::size_t r = 0; r < rounds.size(); ++r) {
    std::vector<Tensors> in, got;
    for (std::size_t m = 0; m < 2; ++m) {
      Tensor t = Tensor::zeros({(1 << 20) + 3});
      for (std::int64_t k = 0; k < t.numel(); ++k) t.data<float>()[k] = real(rng);
      in.push_back({t});
      got.push_back(clones(in.back()));
    }
    for (std::size_t m = 0; m < 2; ++m) {
      coll[m]->all_reduce(group, group[m], static_cast<std::int64_t>(r), got[m],
                          rounds[r].contributes[m], rounds[r].op, events.done());
    }
    ASSERT_TRUE(events.wait_done(static_cast<int>(2 * (r + 1)))) << events.first_error();
    const std::vector<Tensors> want = reference(group, in, rounds[r].contributes, rounds[r].op);
    for (std::size_t m = 0; m < 2; ++m) {
      expect_bitwise_equal(got[m], want[m],
                           "round " + std::to_string(r) + ", member " + std::to_string(m));
    }
  }
  EXPECT_TRUE(events.errors().empty());
}

TEST(GlooCollectives, MembersThatDisagreeFailBeforeTouchingTensorsReducedInPlace) {
  World world(2);
  Events events;
  auto coll = collectives_in_place(world, events, 0, "gloo");
  std::vector<Tensor> t = {Tensor::full({5}, 1.0f), Tensor::full({5}, 2.0f)};
  for (int r = 0; r < 2; ++r) {
    coll[static_cast<std::size_t>(r)]->all_reduce(
        std::vector<Endpoint>{0, 1}, r, 0, {t[static_cast<std::size_t>(r)]}, true,
        r == 0 ? Reduction::sum : Reduction::mean, events.done());
  }
  const std::vector<std::string> errors = events.wait_errors(2);
  ASSERT_EQ(errors.size(), 2u);
  for (const std::string& e : errors) expect_contains(e, "members disagree on the reduction");
  EXPECT_EQ(events.done_count(), 0);
  EXPECT_EQ(t[0].to_float_vector(), std::vector<float>(5, 1.0f));
  EXPECT_EQ(t[1].to_float_vector(), std::vector<float>(5, 2.0f));
}

TEST(GlooCollectives, ATensorPassedTwiceInARoundIsReducedOnce) {
  World world(2);
  Events events;
  // Every tensor would be reduced in place, but one whose storage another shares is packed.
  auto coll = collectives_in_place(world, events, 0, "gloo");
  std::vector<Tensor> t = {Tensor::full({4}, 1.0f), Tensor::full({4}, 2.0f)};
  for (int r = 0; r < 2; ++r) {
    const Tensor& x = t[static_cast<std::size_t>(r)];
    coll[static_cast<std::size_t>(r)]->all_reduce(std::vector<Endpoint>{0, 1}, r, 0,
                                                  {x, Tensor::full({3}, 1.0f), x}, true,
                                                  Reduction::sum, events.done());
  }
  ASSERT_TRUE(events.wait_done(2)) << events.first_error();
  EXPECT_EQ(t[0].to_float_vector(), std::vector<float>(4, 3.0f));
  EXPECT_EQ(t[1].to_float_vector(), std::vector<float>(4, 3.0f));
}

TEST(RendezvousStore, SetGetAndWaitAcrossRanksThroughGloosPrefixStore) {
  World world(2);
  expect_no_errors(run_ranks(2, [&](int r) {
    RendezvousStore base(world.at(r), kLong);
    gloo::rendezvous::PrefixStore store("job/a", base);
    const std::string mine = "k" + std::to_string(r);
    const std::string theirs = "k" + std::to_string(1 - r);
    store.set(mine, std::vector<char>{'v', static_cast<char>('0' + r), '\0', '\xff'});
    store.wait({theirs, mine});
    EXPECT_EQ(store.get(theirs),
              (std::vector<char>{'v', static_cast<char>('1' - r), '\0', '\xff'}));
    // Keys of another prefix are other keys.
    EXPECT_EQ(world.at(r).get("job/a/" + theirs, kLong).size(), 4u);
    world.at(r).barrier("read", kLong);
  }));
}

TEST(RendezvousStore, TimeoutsNameTheMissingKeyAndNoTimeoutStillEnds) {
  World world(1);
  RendezvousStore store(world.at(0), 300ms);
  store.set("here", {'x'});
  try {
    store.wait({"here", "missing"}, 200ms);
    ADD_FAILURE() << "waiting for a key nobody sets returned";
  } catch (const gloo::IoException& e) {
    expect_contains(e.what(), "wait for 'here', 'missing' (up to 200 ms)");
    expect_contains(e.what(), "get 'missing' timed out");
  }
  // Gloo's kNoTimeout falls back to the store's own timeout.
  EXPECT_THROW(store.wait({"missing"}, gloo::kNoTimeout), gloo::IoException);
  try {
    (void)store.get("absent");
    ADD_FAILURE() << "getting a key nobody sets returned";
  } catch (const gloo::IoException& e) {
    expect_contains(e.what(), "get 'absent' timed out after 300 ms");
  }
  EXPECT_THROW(store.set("bad\nkey", {}), std::invalid_argument);
  EXPECT_THROW(RendezvousStore(world.at(0), 0ms), std::invalid_argument);
}

}  // namespace
}  // namespace tandem::transport
