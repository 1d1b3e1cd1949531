// Random small instances: the simulator's times equal the longest paths of the dependency DAG
// (plus device order) built here independently, pair by pair; every generated order
// validates; a broken one is rejected by the validator and the simulator alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/simulator.hpp"
#include "schedules/validator.hpp"

namespace tandem::schedules {
namespace {

struct Affine {
  double fixed, per_sample;
  double at(std::int64_t b) const { return fixed + per_sample * static_cast<double>(b); }
};

struct Instance {
  ScheduleParams params;
  std::vector<Affine> forward, backward, weight;  // per stage
  std::vector<double> output_bytes;               // per stage
  double latency = 0, bandwidth = 1, sync = 0, step = 0;

  SimulationCosts costs() const {
    SimulationCosts c;
    for (int s = 0; s < params.stages; ++s) {
      StageCosts sc;
      sc.forward = Cost::affine(forward[s].fixed, forward[s].per_sample);
      sc.backward = Cost::affine(backward[s].fixed, backward[s].per_sample);
      sc.weight = Cost::affine(weight[s].fixed, weight[s].per_sample);
      sc.output_bytes = output_bytes[s];
      c.stages.push_back(sc);
    }
    c.latency = latency;
    c.bandwidth = bandwidth;
    c.sync = sync;
    c.step = step;
    return c;
  }
};

std::vector<std::int64_t> random_composition(std::mt19937& rng, std::int64_t total) {
  std::vector<std::int64_t> out;
  while (total > 0) {
    const auto b = std::uniform_int_distribution<std::int64_t>(1, total)(rng);
    out.push_back(b);
    total -= b;
  }
  return out;
}

Instance random_instance(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto real = [&](double lo, double hi) { return std::uniform_real_distribution<>(lo, hi)(rng); };
  const ScheduleKind kinds[] = {ScheduleKind::naive,         ScheduleKind::gpipe,
                                ScheduleKind::one_f_one_b,   ScheduleKind::zb_h1,
                                ScheduleKind::interleaved,   ScheduleKind::umpipe,
                                ScheduleKind::pipedream,     ScheduleKind::pipedream_vsync,
                                ScheduleKind::pipedream_2bw, ScheduleKind::zb_v,
                                ScheduleKind::zb_2p};
  Instance in;
  ScheduleParams& p = in.params;
  p.kind = kinds[pick(0, 10)];
  p.stages = pick(1, 4);
  p.slices = pick(1, 6);
  p.minibatches = pick(1, 2);
  switch (p.kind) {
    case ScheduleKind::gpipe:
      p.rematerialize = pick(0, 1) == 1;
      [[fallthrough]];
    case ScheduleKind::naive:
    case ScheduleKind::one_f_one_b:
      if (pick(0, 1)) {
        for (int s = 0; s < p.stages; ++s) p.replicas.push_back(pick(1, 2));
      }
      p.minibatch_size = p.slices + pick(0, 4);
      break;
    case ScheduleKind::interleaved:
      p.slices = p.stages * pick(1, 2);
      p.chunks = pick(1, 3);
      break;
    case ScheduleKind::umpipe:
      p.minibatch_size = pick(1, 8);
      p.slices = 1;
      for (int s = 0; s < p.stages; ++s) {
        p.forward_slices.push_back(random_composition(rng, p.minibatch_size));
        p.backward_slices.push_back(random_composition(rng, p.minibatch_size));
      }
      break;
    case ScheduleKind::pipedream:
      for (int s = 0; s < p.stages; ++s) p.replicas.push_back(pick(1, 3));
      [[fallthrough]];
    case ScheduleKind::pipedream_vsync:
      p.slices = 1;
      p.minibatches = pick(1, 6);
      break;
    case ScheduleKind::pipedream_2bw:
      p.slices = std::max(p.slices, p.stages);
      break;
    case ScheduleKind::zb_v:
      p.chunks = 2;
      p.slices = pick(1, 10);
      break;
    default:
      break;
  }
  for (int s = 0; s < p.stages; ++s) {
    in.forward.push_back({real(0, 2), real(0, 1)});
    in.backward.push_back({real(0, 3), real(0, 1)});
    in.weight.push_back({real(0, 1), real(0, 0.5)});
    in.output_bytes.push_back(real(0, 4));
  }
  in.latency = pick(0, 1) ? real(0, 2) : 0.0;
  in.bandwidth = real(0.5, 8);
  in.sync = real(0, 1);
  in.step = real(0, 0.5);
  return in;
}

// Start times by the rules of docs/architecture.md#simulator-and-golden-numbers, from scratch:
// every pair of actions is tested for a dependency, then longest paths in topological order.
struct Reference {
  std::vector<std::vector<double>> start, end;
  double makespan = 0;
};

// Written out here rather than taken from ScheduleParams, so that the reference checks it: chunk
// c of stage s sits at c * p + s, except zb-v's V (chunk 1 of stage s at 2p - 1 - s).
int reference_vstage(const ScheduleParams& p, int stage, int chunk) {
  if (p.kind == ScheduleKind::zb_v && chunk == 1) return 2 * p.stages - 1 - stage;
  return chunk * p.stages + stage;
}

int reference_stage_of(const ScheduleParams& p, int vs) {
  if (p.kind == ScheduleKind::zb_v && vs >= p.stages) return 2 * p.stages - 1 - vs;
  return vs % p.stages;
}

Reference reference(const ActionList& list, const Instance& in) {
  const ScheduleParams& p = list.params;
  struct Node {
    int device, index, stage, vs;
    Action a;
    double duration, delay;
  };
  std::vector<Node> nodes;
  std::vector<bool> split(p.stages * p.chunks, false);
  for (int d = 0; d < static_cast<int>(list.devices.size()); ++d) {
    for (const Action& a : list.devices[d]) {
      if (a.op == Op::W) split[reference_vstage(p, p.stage_of(d), a.chunk)] = true;
    }
  }
  const double share = 1.0 / p.chunks;
  for (int d = 0; d < static_cast<int>(list.devices.size()); ++d) {
    const int s = p.stage_of(d);
    for (int i = 0; i < static_cast<int>(list.devices[d].size()); ++i) {
      const Action& a = list.devices[d][i];
      const int vs = reference_vstage(p, s, a.chunk);
      const auto n = a.slice.size();
      Node node{d, i, s, vs, a, 0, in.latency};
      if (a.op == Op::F) {
        node.duration = share * in.forward[s].at(n);
        node.delay += in.output_bytes[s] * n / in.bandwidth;
      } else if (a.op == Op::B) {
        node.duration = share * in.backward[s].at(n);
        if (!split[vs]) node.duration += share * in.weight[s].at(n);
        if (p.rematerialize) node.duration += share * in.forward[s].at(n);
        if (vs > 0) node.delay += in.output_bytes[reference_stage_of(p, vs - 1)] * n / in.bandwidth;
      } else if (a.op == Op::W) {
        node.duration = share * in.weight[s].at(n);
      } else {
        node.duration = a.op == Op::STEP ? in.step : in.sync;
      }
      nodes.push_back(node);
    }
  }
  const std::size_t n = nodes.size();
  struct Edge {
    std::size_t from;
    double lag;
  };
  std::vector<std::vector<Edge>> in_edges(n);
  auto overlap = [](const Action& x, const Action& y) {
    return x.minibatch == y.minibatch && x.slice.overlaps(y.slice);
  };
  for (std::size_t v = 0; v < n; ++v) {
    const Node& b = nodes[v];
    for (std::size_t u = 0; u < n; ++u) {
      const Node& a = nodes[u];
      const double cross = a.device == b.device ? 0.0 : a.delay;
      if (a.device == b.device && a.index + 1 == b.index) in_edges[v].push_back({u, 0});
      const Op x = a.a.op, y = b.a.op;
      if (y == Op::F && x == Op::F && a.vs + 1 == b.vs && overlap(a.a, b.a)) {
        in_edges[v].push_back({u, cross});
      }
      if (y == Op::B && x == Op::F && a.vs == b.vs && overlap(a.a, b.a)) {
        in_edges[v].push_back({u, 0});
      }
      if (y == Op::B && x == Op::B && a.vs == b.vs + 1 && overlap(a.a, b.a)) {
        in_edges[v].push_back({u, cross});
      }
      if (y == Op::W && x == Op::B && a.vs == b.vs && overlap(a.a, b.a)) {
        in_edges[v].push_back({u, 0});
      }
      // SYNC waits for the other replicas of its stage to reach the same round's SYNC.
      if (y == Op::SYNC && a.device != b.device && a.stage == b.stage &&
          a.index + 1 < static_cast<int>(list.devices[a.device].size())) {
        const Action& next = list.devices[a.device][a.index + 1];
        if (next.op == Op::SYNC && next.minibatch == b.a.minibatch) {
          in_edges[v].push_back({u, 0});
        }
      }
    }
  }
  std::vector<int> missing(n);
  std::vector<std::vector<std::size_t>> out_edges(n);
  for (std::size_t v = 0; v < n; ++v) {
    missing[v] = static_cast<int>(in_edges[v].size());
    for (const Edge& e : in_edges[v]) out_edges[e.from].push_back(v);
  }
  std::vector<std::size_t> ready;
  for (std::size_t v = 0; v < n; ++v) {
    if (missing[v] == 0) ready.push_back(v);
  }
  std::vector<double> start(n, 0), end(n, 0);
  std::size_t done = 0;
  while (!ready.empty()) {
    const std::size_t v = ready.back();
    ready.pop_back();
    ++done;
    for (const Edge& e : in_edges[v]) start[v] = std::max(start[v], end[e.from] + e.lag);
    end[v] = start[v] + nodes[v].duration;
    for (std::size_t w : out_edges[v]) {
      if (--missing[w] == 0) ready.push_back(w);
    }
  }
  EXPECT_EQ(done, n) << "the reference found a cycle";
  Reference r;
  r.start.resize(list.devices.size());
  r.end.resize(list.devices.size());
  for (std::size_t v = 0; v < n; ++v) {
    r.start[nodes[v].device].push_back(start[v]);
    r.end[nodes[v].device].push_back(end[v]);
    r.makespan = std::max(r.makespan, end[v]);
  }
  return r;
}

TEST(ScheduleProperty, SimulatorEqualsLongestPath) {
  std::mt19937 rng(20240611);
  Simulator sim;  // reused: buffers must not leak state between runs
  for (int trial = 0; trial < 400; ++trial) {
    const Instance in = random_instance(rng);
    const ActionList list = Schedule(in.params).materialize();
    SCOPED_TRACE("trial " + std::to_string(trial) + " " + std::string(to_string(in.params.kind)) +
                 " p=" + std::to_string(in.params.stages) +
                 " m=" + std::to_string(in.params.slices));
    ASSERT_NO_THROW(validate(list));
    const SimulationResult& got = sim.run(list, in.costs());
    const Reference want = reference(list, in);
    EXPECT_NEAR(got.makespan, want.makespan, 1e-9);
    for (const OpInterval& op : got.timeline) {
      ASSERT_NEAR(op.start, want.start[op.device][op.index], 1e-9)
          << "d" << op.device << " #" << op.index;
      ASSERT_NEAR(op.end, want.end[op.device][op.index], 1e-9);
    }
  }
}

TEST(ScheduleProperty, BrokenOrdersAreRejected) {
  std::mt19937 rng(7);
  constexpr int kTrials = 200;
  int broken = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const Instance in = random_instance(rng);
    ActionList list = Schedule(in.params).materialize();
    // Move one B to the front of its device: it now precedes its own F there.
    std::vector<std::pair<std::size_t, std::size_t>> backwards;
    for (std::size_t d = 0; d < list.devices.size(); ++d) {
      for (std::size_t i = 0; i < list.devices[d].size(); ++i) {
        if (list.devices[d][i].op == Op::B) backwards.emplace_back(d, i);
      }
    }
    if (backwards.empty()) continue;
    ++broken;
    const auto [d, i] =
        backwards[std::uniform_int_distribution<std::size_t>(0, backwards.size() - 1)(rng)];
    auto& order = list.devices[d];
    std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(i),
                order.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    SCOPED_TRACE("trial " + std::to_string(trial));
    try {
      validate(list);
      ADD_FAILURE() << "a B before its F was accepted";
    } catch (const ScheduleError& e) {
      EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("d" + std::to_string(d) + " #0 B"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(simulate(list, in.costs()), ScheduleError);
  }
  // Every schedule has backwards: each trial broke an order.
  EXPECT_EQ(broken, kTrials);
}

// The V-shaped and the 2p zero-bubble orders are runnable for every pipeline depth and slice
// count, over several minibatches: the validator proves each complete, deadlock-free and at one
// weight version.
TEST(ScheduleProperty, ZeroBubbleVAnd2PValidate) {
  for (ScheduleKind kind : {ScheduleKind::zb_v, ScheduleKind::zb_2p}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 3 * p + 1; ++m) {
        ScheduleParams sp;
        sp.kind = kind;
        sp.stages = p;
        sp.slices = m;
        sp.minibatches = 2;
        sp.chunks = kind == ScheduleKind::zb_v ? 2 : 1;
        SCOPED_TRACE(std::string(to_string(kind)) + " p=" + std::to_string(p) +
                     " m=" + std::to_string(m));
        const ActionList list = Schedule(sp).materialize();
        ASSERT_NO_THROW(validate(list));
        for (const auto& order : list.devices) {
          // Per chunk: F, B and W of every slice, per minibatch, and one STEP per minibatch.
          EXPECT_EQ(order.size(), static_cast<std::size_t>(2 * (3 * m * sp.chunks + 1)));
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem::schedules
