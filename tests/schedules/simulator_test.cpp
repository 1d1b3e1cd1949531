#include "schedules/simulator.hpp"

#include <gtest/gtest.h>

#include <string>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/text_form.hpp"

namespace tandem::schedules {
namespace {

constexpr double kTol = 1e-9;

ActionList make(ScheduleKind kind, int p, int m) {
  ScheduleParams sp;
  sp.kind = kind;
  sp.stages = p;
  sp.slices = m;
  return Schedule(sp).materialize();
}

TEST(ScheduleSimulator, LinkContentionSerializesMessages) {
  // Two stages, GPipe, m = 2: F takes 0.5, messages 2 time units of transfer each.
  const ActionList list = make(ScheduleKind::gpipe, 2, 2);
  SimulationCosts costs = SimulationCosts::uniform(2, 0.5, 0);
  costs.stages[0].output_bytes = 2;
  costs.bandwidth = 1;
  const auto free_links = simulate(list, costs);
  // The timeline lists d0's five actions first, so d1's F0 and F1 are entries 5 and 6.
  // d1's F0 waits for the message sent at 0.5 (arrives 2.5), F1 for the one sent at 1 (3).
  EXPECT_NEAR(free_links.timeline[5].start, 2.5, kTol);
  EXPECT_NEAR(free_links.timeline[6].start, 3.0, kTol);
  costs.contention = true;
  costs.latency = 0.25;
  const auto busy_link = simulate(list, costs);
  // F1's message waits for F0's to leave the link: 2.5 + 2, then the latency.
  EXPECT_NEAR(busy_link.timeline[5].start, 2.75, kTol);
  EXPECT_NEAR(busy_link.timeline[6].start, 4.75, kTol);
}

TEST(ScheduleSimulator, BusyIdleAndBubble) {
  const auto r = simulate(make(ScheduleKind::gpipe, 4, 8), SimulationCosts::uniform(4, 1, 2));
  for (int d = 0; d < 4; ++d) {
    EXPECT_NEAR(r.busy[d], 24, kTol);
    EXPECT_NEAR(r.idle[d], 9, kTol);
  }
  EXPECT_NEAR(r.bubble, 9.0 / 33.0, kTol);  // (p-1)/(m+p-1)
  EXPECT_EQ(r.timeline.size(), 4u * 17u);
  Simulator sim;
  EXPECT_TRUE(sim.run(make(ScheduleKind::gpipe, 4, 8), SimulationCosts::uniform(4, 1, 2), false)
                  .timeline.empty());
}

TEST(ScheduleSimulator, MemoryCountsVersionsAndActivations) {
  SimulationCosts costs = SimulationCosts::uniform(4, 1, 2);
  for (auto& s : costs.stages) {
    s.weight_bytes = 100;
    s.activation_bytes = 10;
    s.input_bytes = 1;
  }
  const auto gpipe = simulate(make(ScheduleKind::gpipe, 4, 8), costs);
  const auto ofob = simulate(make(ScheduleKind::one_f_one_b, 4, 8), costs);
  for (int s = 0; s < 4; ++s) {
    EXPECT_NEAR(gpipe.memory[s], 100 + 8 * 10, kTol);
    EXPECT_NEAR(ofob.memory[s], 100 + (4 - s) * 10, kTol);
  }
  ScheduleParams pd;
  pd.kind = ScheduleKind::pipedream;
  pd.stages = 4;
  pd.minibatches = 20;
  pd.minibatch_size = 2;
  const auto stash = simulate(Schedule(pd).materialize(), costs);
  for (int s = 0; s < 4; ++s) {
    // w_s + 1 versions and as many minibatches of 2 samples in flight.
    EXPECT_NEAR(stash.memory[s], 100 * (4 - s) + (4 - s) * 2 * 10, kTol);
    EXPECT_EQ(stash.peak_in_flight_samples[s], 2 * (4 - s));
  }
}

TEST(ScheduleSimulator, RematerializationTradesTimeForMemory) {
  ScheduleParams sp;
  sp.kind = ScheduleKind::gpipe;
  sp.stages = 4;
  sp.slices = 8;
  SimulationCosts costs = SimulationCosts::uniform(4, 1, 2);
  for (auto& s : costs.stages) {
    s.activation_bytes = 10;
    s.input_bytes = 1;
  }
  const auto plain = simulate(Schedule(sp).materialize(), costs);
  sp.rematerialize = true;
  const auto remat = simulate(Schedule(sp).materialize(), costs);
  // B recomputes the forward: as GPipe with t_b = 3.
  EXPECT_NEAR(
      remat.makespan,
      simulate(Schedule(ScheduleParams{.kind = ScheduleKind::gpipe, .stages = 4, .slices = 8})
                   .materialize(),
               SimulationCosts::uniform(4, 1, 3))
          .makespan,
      kTol);
  EXPECT_GT(remat.makespan, plain.makespan);
  EXPECT_NEAR(plain.memory[0], 80, kTol);
  EXPECT_NEAR(remat.memory[0], 8 * 1 + 10, kTol);  // inputs + one recomputed slice
}

TEST(ScheduleSimulator, SyncWaitsForEveryReplica) {
  // Stage 0 has two replicas; replica 1's work ends later, so both SYNCs start together.
  const ActionList list = parse_actions(
      "schedule custom stages=1 replicas=2 slices=2\n"
      "d0: F0 B0 SYNC STEP\n"
      "d1: F1 B1 SYNC STEP\n");
  SimulationCosts costs;
  StageCosts st;
  st.forward = Cost::affine(0, 1);  // one time unit per sample...
  st.backward = Cost::function([](std::int64_t b) { return 2.0 * static_cast<double>(b); });
  costs.stages = {st};
  costs.sync = 0.5;
  costs.latency = 7;  // collectives pay `sync`, not the message latency
  const ActionList wider = [&] {
    ActionList l = list;
    l.devices[1][0].slice = {1, 3};  // ...so replica 1's slice of 2 samples takes longer
    l.devices[1][1].slice = {1, 3};
    l.params.minibatch_size = 3;
    return l;
  }();
  const auto r = simulate(wider, costs);
  EXPECT_NEAR(r.timeline[2].start, 6, kTol);  // d0's SYNC waits for d1's B to end at 6
  EXPECT_NEAR(r.timeline[6].start, 6, kTol);
  EXPECT_NEAR(r.makespan, 6.5, kTol);
}

// Interleaved, 2 stages of 2 chunks, 2 slices.
ActionList interleaved_two_by_two() {
  ScheduleParams sp;
  sp.kind = ScheduleKind::interleaved;
  sp.stages = 2;
  sp.slices = 2;
  sp.chunks = 2;
  return Schedule(sp).materialize();
}

TEST(ScheduleSimulator, ChunkCosts) {
  const ActionList list = interleaved_two_by_two();
  // Per-stage costs are split across chunks; per-chunk costs are taken as they are.
  SimulationCosts per_stage = SimulationCosts::uniform(2, 2, 4);
  SimulationCosts per_chunk = SimulationCosts::uniform(4, 1, 2);
  EXPECT_NEAR(simulate(list, per_stage).makespan, simulate(list, per_chunk).makespan, kTol);
  SimulationCosts wrong = SimulationCosts::uniform(3, 1, 2);
  EXPECT_THROW(simulate(list, wrong), ScheduleError);
}

// STEP takes the global step plus its stage's own (each chunk's part of it).
TEST(ScheduleSimulator, StepTakesItsStagesOwnUpdate) {
  // GPipe, 2 stages, 1 slice: F0 [0,1], F1 [1,2], B1 [2,4], B0 [4,6]; stage 1's STEP starts at
  // 4 and stage 0's at 6.
  const ActionList list = make(ScheduleKind::gpipe, 2, 1);
  SimulationCosts costs = SimulationCosts::uniform(2, 1, 2);
  EXPECT_NEAR(simulate(list, costs).makespan, 6, kTol);
  costs.stages[1].step = 3;
  EXPECT_NEAR(simulate(list, costs).makespan, 7, kTol);
  costs.step = 0.5;
  EXPECT_NEAR(simulate(list, costs).makespan, 7.5, kTol);
  costs.stages[0].step = 2;  // 6 + 0.5 + 2
  EXPECT_NEAR(simulate(list, costs).makespan, 8.5, kTol);

  const ActionList chunked = interleaved_two_by_two();
  SimulationCosts per_stage = SimulationCosts::uniform(2, 2, 4);
  SimulationCosts per_chunk = SimulationCosts::uniform(4, 1, 2);
  for (int s = 0; s < 2; ++s) per_stage.stages[s].step = 10;
  for (int v = 0; v < 4; ++v) per_chunk.stages[v].step = 5;
  const double without = simulate(chunked, SimulationCosts::uniform(4, 1, 2)).makespan;
  EXPECT_NEAR(simulate(chunked, per_stage).makespan, without + 10, kTol);
  EXPECT_NEAR(simulate(chunked, per_chunk).makespan, without + 10, kTol);
}

TEST(ScheduleSimulator, RejectsBadCosts) {
  const ActionList list = make(ScheduleKind::gpipe, 2, 2);
  SimulationCosts costs = SimulationCosts::uniform(2, 1, 2);
  costs.stages[1].backward = -5;
  try {
    simulate(list, costs);
    FAIL();
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("duration of d1 #2 B"), std::string::npos) << e.what();
  }
  costs = SimulationCosts::uniform(2, 1, 2);
  costs.bandwidth = 0;
  EXPECT_THROW(simulate(list, costs), ScheduleError);
}

}  // namespace
}  // namespace tandem::schedules
