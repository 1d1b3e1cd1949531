// The simulator on a graph model's routing (SimulationCosts::edges): each tensor edge's bytes
// travel on the link between the devices of its two ends, so a skip costs on its own link, a
// relayed tensor on every link it is relayed over, and a chain given as edges times exactly
// as the chain does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/simulator.hpp"

namespace tandem::schedules {
namespace {

ActionList make(ScheduleKind kind, std::vector<int> replicas, int m, int chunks = 1) {
  ScheduleParams sp;
  sp.kind = kind;
  sp.stages = static_cast<int>(replicas.size());
  sp.replicas = std::move(replicas);
  sp.slices = m;
  sp.minibatch_size = 2 * m;  // two samples per slice
  sp.chunks = chunks;
  return Schedule(sp).materialize();
}

// Each virtual stage's output to the next as one edge of `bytes` per sample.
std::vector<EdgeBytes> chain_edges(int virtual_stages, double bytes) {
  std::vector<EdgeBytes> out;
  for (int v = 0; v + 1 < virtual_stages; ++v) out.push_back({{v, v + 1, v}, bytes});
  return out;
}

// Four stages: the chain's edges of 1 byte per sample, and a tensor of `skip` bytes per
// sample made on stage 0 and read on stage 2, sent straight there or relayed by stage 1.
std::vector<EdgeBytes> skip_edges(double skip, bool relay) {
  std::vector<EdgeBytes> out = chain_edges(4, 1);
  constexpr int kSkipped = 9;  // the producing layer: any item other than the chain's
  if (relay) {
    out.push_back({{0, 1, kSkipped}, skip});
    out.push_back({{1, 2, kSkipped}, skip});
  } else {
    out.push_back({{0, 2, kSkipped}, skip});
  }
  return out;
}

SimulationCosts link_costs(int stages) {
  SimulationCosts costs = SimulationCosts::uniform(stages, 1, 2, 0, 0.25);
  costs.bandwidth = 1;
  return costs;
}

double start_of_first(const SimulationResult& r, int device) {
  for (const OpInterval& op : r.timeline) {
    if (op.device == device && op.index == 0) return op.start;
  }
  ADD_FAILURE() << "no action on d" << device;
  return 0;
}

TEST(SimulatorEdges, AChainGivenAsEdgesTimesAsTheChain) {
  struct Case {
    std::string name;
    ActionList list;
  };
  const std::vector<Case> cases = {
      {"1f1b", make(ScheduleKind::one_f_one_b, {1, 1, 1, 1}, 4)},
      {"1f1b_2111", make(ScheduleKind::one_f_one_b, {2, 1, 1, 1}, 4)},
      {"gpipe", make(ScheduleKind::gpipe, {1, 1, 1, 1}, 4)},
      {"zb_h1", make(ScheduleKind::zb_h1, {1, 1, 1, 1}, 4)},
      {"interleaved", make(ScheduleKind::interleaved, {1, 1}, 4, 2)},
  };
  for (const Case& c : cases) {
    for (const bool contention : {false, true}) {
      SCOPED_TRACE(c.name + (contention ? " with contention" : ""));
      const ScheduleParams& p = c.list.params;
      SimulationCosts chain = link_costs(p.stages);
      for (StageCosts& s : chain.stages) s.output_bytes = 3;
      chain.contention = contention;
      SimulationCosts graph = chain;
      graph.edges = chain_edges(p.stages * p.chunks, 3);
      const SimulationResult want = simulate(c.list, chain);
      const SimulationResult got = simulate(c.list, graph);
      EXPECT_EQ(got.makespan, want.makespan);
      ASSERT_EQ(got.timeline.size(), want.timeline.size());
      for (std::size_t i = 0; i < want.timeline.size(); ++i) {
        EXPECT_EQ(got.timeline[i].start, want.timeline[i].start) << "action " << i;
      }
    }
  }
}

TEST(SimulatorEdges, ASkipEdgesBytesTravelOnItsOwnLink) {
  const ActionList list = make(ScheduleKind::one_f_one_b, {1, 1, 1, 1}, 4);
  SimulationCosts costs = link_costs(4);
  // Stage 2's first F waits for the chain's tensor (F on d0 ends at 1, 2 bytes take 2, F on d1
  // ends at 4.25, 2 more bytes: 6.5) and for the skip (16 bytes from d0: 1 + 16 + 0.25).
  costs.edges = skip_edges(8, false);
  EXPECT_DOUBLE_EQ(start_of_first(simulate(list, costs), 2), 17.25);
  costs.edges = skip_edges(0.5, false);
  EXPECT_DOUBLE_EQ(start_of_first(simulate(list, costs), 2), 6.5);

  // The step grows with the skip's size once its link is slower than the chain's path.
  double previous = 0;
  for (const double skip : {0.0, 4.0, 8.0, 16.0}) {
    costs.edges = skip_edges(skip, false);
    const double makespan = simulate(list, costs).makespan;
    if (skip > 2) {
      EXPECT_GT(makespan, previous) << skip << " bytes per sample";
    }
    previous = makespan;
  }
}

TEST(SimulatorEdges, RelayingASkipCostsMoreThanSendingItStraight) {
  const ActionList list = make(ScheduleKind::one_f_one_b, {1, 1, 1, 1}, 4);
  for (const bool contention : {false, true}) {
    SCOPED_TRACE(contention ? "with contention" : "free links");
    SimulationCosts costs = link_costs(4);
    costs.contention = contention;
    costs.edges = skip_edges(4, false);
    const double direct = simulate(list, costs).makespan;
    costs.edges = skip_edges(4, true);
    const double relayed = simulate(list, costs).makespan;
    EXPECT_LT(direct, relayed);
  }
  // Free, instant links: where a tensor travels costs nothing.
  SimulationCosts costs = SimulationCosts::uniform(4, 1, 2);
  costs.edges = skip_edges(4, false);
  const double direct = simulate(list, costs).makespan;
  costs.edges = skip_edges(4, true);
  EXPECT_EQ(direct, simulate(list, costs).makespan);
}

TEST(SimulatorEdges, ContentionQueuesASendersMessagesOnOneLink) {
  // Two stages, one slice: F on d0 sends two tensors to d1, 1 and 3 bytes per sample (two
  // samples). Free links: the larger arrives at 1 + 6; one link: after the smaller, 1 + 2 + 6.
  const ActionList list = make(ScheduleKind::gpipe, {1, 1}, 1);
  SimulationCosts costs = SimulationCosts::uniform(2, 1, 1);
  costs.bandwidth = 1;
  costs.edges = {{{0, 1, 0}, 1}, {{0, 1, 1}, 3}};
  EXPECT_DOUBLE_EQ(start_of_first(simulate(list, costs), 1), 7);
  costs.contention = true;
  EXPECT_DOUBLE_EQ(start_of_first(simulate(list, costs), 1), 9);
}

TEST(SimulatorEdges, RejectsBadEdges) {
  const ActionList list = make(ScheduleKind::one_f_one_b, {1, 1, 1, 1}, 4);
  SimulationCosts costs = link_costs(4);
  costs.edges = skip_edges(-1, false);
  EXPECT_THROW(simulate(list, costs), ScheduleError);
  costs.edges = chain_edges(4, 1);
  costs.edges.push_back({{2, 5, 7}, 1});  // virtual stage 5 of 4
  EXPECT_THROW(simulate(list, costs), ScheduleError);
  costs.edges = {{{0, 1, 0}, 1}, {{1, 2, 1}, 1}};  // stage 3 receives nothing
  EXPECT_THROW(simulate(list, costs), ScheduleError);
}

}  // namespace
}  // namespace tandem::schedules
