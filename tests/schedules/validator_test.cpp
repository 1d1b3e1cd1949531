#include "schedules/validator.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/simulator.hpp"

namespace tandem::schedules {
namespace {

ActionList one_f_one_b(int p, int m) {
  ScheduleParams sp;
  sp.kind = ScheduleKind::one_f_one_b;
  sp.stages = p;
  sp.slices = m;
  return Schedule(sp).materialize();
}

std::string error_of(const ActionList& list) {
  try {
    validate(list);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& text, const std::string& needle) {
  EXPECT_NE(text.find(needle), std::string::npos) << "'" << needle << "' not in: " << text;
}

TEST(ScheduleValidator, AcceptsEveryGeneratedSchedule) {
  for (auto kind : {ScheduleKind::naive, ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                    ScheduleKind::zb_h1, ScheduleKind::umpipe}) {
    for (int p = 1; p <= 4; ++p) {
      for (int m = 1; m <= 6; ++m) {
        ScheduleParams sp;
        sp.kind = kind;
        sp.stages = p;
        sp.slices = m;
        sp.minibatches = 2;
        EXPECT_NO_THROW(validate(Schedule(sp).materialize())) << to_string(kind) << p << m;
      }
    }
  }
}

TEST(ScheduleValidator, DeadlockNamesTheFirstStuckActionOfEachDevice) {
  ActionList list = one_f_one_b(2, 2);
  // d1: F0 B0 F1 B1 -> B0 B1 F0 F1: B0 waits for F0 behind it on the same device.
  auto& d1 = list.devices[1];
  std::swap(d1[0], d1[1]);  // B0 F0 F1 B1
  const std::string err = error_of(list);
  expect_contains(err, "deadlock");
  expect_contains(err, "d1 #0 B(mb 0, [0,1)) on stage 1 waits for d1 #1 F(mb 0, [0,1))");
  expect_contains(err, "d0 #2 B(mb 0, [0,1)) on stage 0 waits for d1 #0 B(mb 0, [0,1))");
  // The simulator refuses the same order instead of hanging.
  EXPECT_THROW(simulate(list, SimulationCosts::uniform(2, 1, 2)), ScheduleError);
}

TEST(ScheduleValidator, CrossDeviceDeadlock) {
  ActionList list = one_f_one_b(2, 2);
  // d0: F0 B0 F1 B1 (naive) against d1: F1 B1 F0 B0. d0's B0 needs d1's B0, which comes after
  // d1's F1, which needs d0's F1, which comes after d0's B0: a cycle across devices.
  list.devices[0] = {{Op::F, 0, {0, 1}},
                     {Op::B, 0, {0, 1}},
                     {Op::F, 0, {1, 2}},
                     {Op::B, 0, {1, 2}},
                     {Op::STEP, 0, {}}};
  list.devices[1] = {{Op::F, 0, {1, 2}},
                     {Op::B, 0, {1, 2}},
                     {Op::F, 0, {0, 1}},
                     {Op::B, 0, {0, 1}},
                     {Op::STEP, 0, {}}};
  const std::string err = error_of(list);
  expect_contains(err, "deadlock");
  expect_contains(err, "d0 #1 B(mb 0, [0,1))");
  expect_contains(err, "d1 #0 F(mb 0, [1,2))");
}

TEST(ScheduleValidator, MissingBackward) {
  ActionList list = one_f_one_b(2, 3);
  auto& d0 = list.devices[0];
  for (auto it = d0.begin(); it != d0.end(); ++it) {
    if (it->op == Op::B && it->slice.begin == 2) {
      d0.erase(it);
      break;
    }
  }
  expect_contains(error_of(list), "d0 #3 F(mb 0, [2,3)) on stage 0: has no B for samples [2,3)");
}

TEST(ScheduleValidator, MissingUpstreamForward) {
  ActionList list = one_f_one_b(2, 2);
  auto& d1 = list.devices[1];
  d1.insert(d1.begin(), Action{Op::F, 1, {0, 1}});
  d1.insert(d1.begin() + 1, Action{Op::B, 1, {0, 1}});
  expect_contains(error_of(list), "never computed by an F on stage 0");
}

TEST(ScheduleValidator, DuplicateWork) {
  ActionList list = one_f_one_b(2, 2);
  list.devices[0].insert(list.devices[0].begin(), Action{Op::F, 0, {0, 1}});
  expect_contains(error_of(list), "again");
}

TEST(ScheduleValidator, SplitBackwardNeedsItsW) {
  ScheduleParams sp;
  sp.kind = ScheduleKind::zb_h1;
  sp.stages = 2;
  sp.slices = 3;
  ActionList list = Schedule(sp).materialize();
  auto& d1 = list.devices[1];
  for (auto it = d1.begin(); it != d1.end(); ++it) {
    if (it->op == Op::W) {
      d1.erase(it);
      break;
    }
  }
  expect_contains(error_of(list), "has no W");
}

TEST(ScheduleValidator, EveryReplicaJoinsEverySyncRound) {
  ScheduleParams sp;
  sp.kind = ScheduleKind::pipedream;
  sp.stages = 3;
  sp.replicas = {2, 1, 1};
  sp.minibatches = 9;
  ActionList list = Schedule(sp).materialize();
  EXPECT_EQ(error_of(list), "");
  // Without its SYNC and STEP of round 4, replica 1 would leave replica 0 alone in the
  // all-reduce: rejected, naming the stage, the round and the missing replica.
  auto& d1 = list.devices[1];
  ASSERT_EQ(d1.back(), (Action{Op::STEP, 4, {}, 0, 1}));
  d1.resize(d1.size() - 2);
  expect_contains(error_of(list), "SYNC round 4 of stage 0 lacks replica 1 (d1)");
  // The same for a flush schedule's replicas.
  ScheduleParams gp;
  gp.kind = ScheduleKind::gpipe;
  gp.stages = 2;
  gp.slices = 4;
  gp.replicas = {1, 3};
  list = Schedule(gp).materialize();
  EXPECT_EQ(error_of(list), "");
  auto& d2 = list.devices[2];
  d2.erase(d2.end() - 2);  // its SYNC
  expect_contains(error_of(list), "SYNC round 0 of stage 1 lacks replica 1 (d2)");
}

TEST(ScheduleValidator, FlagsMustMatchTheSchedule) {
  auto first_of = [](ActionList& list, int d, Op op) -> Action& {
    for (Action& a : list.devices[d]) {
      if (a.op == op) return a;
    }
    throw std::logic_error("no such action");
  };
  ScheduleParams zb;
  zb.kind = ScheduleKind::zb_h1;
  zb.stages = 2;
  zb.slices = 3;
  ActionList list = Schedule(zb).materialize();
  first_of(list, 1, Op::B).with_weight = true;
  expect_contains(error_of(list),
                  "d1 #1 B(mb 0, [0,1)) on stage 1: has with_weight = true, but W actions on "
                  "its stage compute the weight gradient");
  // A split B whose stage lost every W: nothing would compute the weight gradient.
  zb.slices = 1;
  list = Schedule(zb).materialize();
  std::erase_if(list.devices[0], [](const Action& a) { return a.op == Op::W; });
  expect_contains(error_of(list), "has with_weight = false, but no W on its stage");

  list = one_f_one_b(2, 2);
  first_of(list, 0, Op::B).with_weight = false;
  expect_contains(error_of(list), "has with_weight = false, but no W on its stage");
  list = one_f_one_b(2, 2);
  first_of(list, 1, Op::F).recompute = true;
  expect_contains(error_of(list), "recompute (re-materialization) applies to gpipe only");
  list = one_f_one_b(2, 2);
  first_of(list, 1, Op::STEP).with_weight = false;
  expect_contains(error_of(list), "with_weight = false applies to B only");

  ScheduleParams gp;
  gp.kind = ScheduleKind::gpipe;
  gp.stages = 2;
  gp.slices = 2;
  gp.rematerialize = true;
  list = Schedule(gp).materialize();
  EXPECT_EQ(error_of(list), "");
  first_of(list, 1, Op::B).recompute = false;
  expect_contains(error_of(list), "recompute is not set but the schedule's rematerialize is on");
}

TEST(ScheduleValidator, InputsFollowTheRouting) {
  // Replicated GPipe: slice i lives on replica i mod r_s. A list that swaps the replicas'
  // slices computes everything, but not where the runtime would send it.
  ScheduleParams gp;
  gp.kind = ScheduleKind::gpipe;
  gp.stages = 2;
  gp.slices = 2;
  gp.replicas = {1, 2};
  ActionList list = Schedule(gp).materialize();
  EXPECT_EQ(error_of(list), "");
  for (int d : {1, 2}) {
    for (Action& a : list.devices[d]) {
      if (a.op == Op::F || a.op == Op::B) a.slice = gp.equal_slice(2 - d);
    }
  }
  expect_contains(error_of(list),
                  "d2 #0 F(mb 0, [0,1)) on stage 1: runs on d2, but the routing places it on d1");
}

TEST(ScheduleValidator, FlushVersionsAreChecked) {
  ScheduleParams sp;
  sp.kind = ScheduleKind::gpipe;
  sp.stages = 1;
  sp.slices = 2;
  sp.minibatches = 2;
  ActionList list = Schedule(sp).materialize();
  // F0 F1 B0 B1 STEP F2 F3 B2 B3 STEP: run minibatch 1's F2 before the first STEP.
  auto& d0 = list.devices[0];
  std::swap(d0[4], d0[5]);
  expect_contains(error_of(list), "needs weight version 1, but only 0 STEPs precede it");
  // A STEP in the middle of minibatch 0: B1 would need a discarded version.
  list = Schedule(sp).materialize();
  std::swap(list.devices[0][3], list.devices[0][4]);
  expect_contains(error_of(list), "weight versions at once");
}

TEST(ScheduleValidator, FieldsAndShape) {
  ActionList list = one_f_one_b(2, 2);
  list.devices.pop_back();
  expect_contains(error_of(list), "1 device orders for 2 devices");
  list = one_f_one_b(2, 2);
  list.devices[1][0].replica = 1;
  expect_contains(error_of(list), "replica field is 1");
  list = one_f_one_b(2, 2);
  list.devices[1][0].chunk = 1;
  expect_contains(error_of(list), "chunk 1 outside [0,1)");
  list = one_f_one_b(2, 2);
  list.devices[0][0].slice = {1, 1};
  expect_contains(error_of(list), "empty or negative slice");
}

// A slice lies within its minibatch: [0, samples), here 2 samples.
TEST(ScheduleValidator, SlicesOutsideTheirMinibatch) {
  ActionList list = one_f_one_b(2, 2);
  list.devices[0][0].slice = {0, 1'000'000'000};
  expect_contains(error_of(list),
                  "d0 #0 F(mb 0, [0,1000000000)) on stage 0: slice [0,1000000000) is outside its "
                  "minibatch [0,2) (2 samples)");
  list = one_f_one_b(2, 2);
  list.devices[1][3].slice = {1, 3};
  expect_contains(error_of(list), "d1 #3 B(mb 0, [1,3)) on stage 1: slice [1,3) is outside");
  list = one_f_one_b(2, 2);
  list.devices[0][1].slice = {2, 3};
  expect_contains(error_of(list), "d0 #1 F(mb 0, [2,3)) on stage 0: slice [2,3) is outside");
}

}  // namespace
}  // namespace tandem::schedules
