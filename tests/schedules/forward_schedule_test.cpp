// The forward-only schedule (prediction): its action lists, the validator's and the
// simulator's view of them, its routing and its admission rules.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedules/pipeline_rules.hpp"
#include "schedules/routing.hpp"
#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/simulator.hpp"
#include "schedules/validator.hpp"

namespace tandem::schedules {
namespace {

ScheduleParams forward(int p, int m, std::vector<int> replicas = {}, std::int64_t minibatches = 1) {
  ScheduleParams sp;
  sp.kind = ScheduleKind::forward;
  sp.stages = p;
  sp.slices = m;
  sp.replicas = std::move(replicas);
  sp.minibatches = minibatches;
  return sp;
}

TEST(ForwardSchedule, ParsesAndIsNoTrainingSchedule) {
  EXPECT_EQ(parse_schedule_kind("forward"), ScheduleKind::forward);
  EXPECT_EQ(to_string(ScheduleKind::forward), "forward");
  EXPECT_FALSE(trains(ScheduleKind::forward));
  EXPECT_TRUE(trains(ScheduleKind::gpipe));
  for (auto name : pipeline_schedule_names()) EXPECT_NE(name, "forward");
}

TEST(ForwardSchedule, EveryStageRunsEveryForwardInOrder) {
  const ActionList list = Schedule(forward(3, 4, {}, 2)).materialize();
  ASSERT_EQ(list.devices.size(), 3u);
  for (const auto& device : list.devices) {
    ASSERT_EQ(device.size(), 8u);
    for (std::size_t i = 0; i < device.size(); ++i) {
      EXPECT_EQ(device[i].op, Op::F);
      EXPECT_EQ(device[i].minibatch, static_cast<std::int64_t>(i / 4));
      EXPECT_EQ(device[i].slice, list.params.equal_slice(static_cast<int>(i % 4)));
    }
  }
  EXPECT_NO_THROW(validate(list));
}

TEST(ForwardSchedule, ReplicasTakeSlicesRoundRobin) {
  const ActionList list = Schedule(forward(4, 5, {2, 1, 1, 1})).materialize();
  ASSERT_EQ(list.devices.size(), 5u);
  std::vector<std::int64_t> first, second;
  for (const Action& a : list.devices[0]) first.push_back(a.slice.begin);
  for (const Action& a : list.devices[1]) second.push_back(a.slice.begin);
  EXPECT_EQ(first, (std::vector<std::int64_t>{0, 2, 4}));
  EXPECT_EQ(second, (std::vector<std::int64_t>{1, 3}));
  for (const Action& a : list.devices[1]) EXPECT_EQ(a.replica, 1);
  EXPECT_EQ(list.devices[2].size(), 5u);
  EXPECT_NO_THROW(validate(list));
}

TEST(ForwardSchedule, SimulatesAsAPipelineOfForwards) {
  const ActionList list = Schedule(forward(4, 8)).materialize();
  const SimulationResult r = simulate(list, SimulationCosts::uniform(4, 1, 2, 0, 0));
  EXPECT_NEAR(r.makespan, 8 + 4 - 1, 1e-9);                     // (m + p - 1) t_f
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{1, 1, 1, 1}));  // nothing kept for a backward
}

TEST(ForwardSchedule, RoutingHasNoTargets) {
  const Routing routing(forward(2, 2));
  std::vector<Route> loader;
  routing.loader_routes(0, loader);
  ASSERT_EQ(loader.size(), 2u);
  for (const Route& r : loader) {
    EXPECT_EQ(r.port, Port::input);
    EXPECT_EQ(r.device, 0);
  }
  const Action last{Op::F, 0, Slice{0, 1}, 0, 0};
  const Routes routes = routing.routes(1, last);
  ASSERT_EQ(routes.inputs.size(), 1u);
  EXPECT_EQ(routes.inputs[0].port, Port::activation);
  EXPECT_TRUE(routes.outputs.empty());
}

TEST(ForwardSchedule, EachInputStageForwardHandsBackItsShare) {
  const ScheduleParams p = forward(2, 3, {2, 1});
  EXPECT_EQ(admission_window(p), 1);
  EXPECT_EQ(admission_releases_per_minibatch(p), 3);
  EXPECT_TRUE(releases_admission(p, 0, Action{Op::F, 0, Slice{0, 1}, 0, 0}));
  EXPECT_FALSE(releases_admission(p, 1, Action{Op::F, 0, Slice{0, 1}, 0, 0}));
}

TEST(ForwardSchedule, ValidatorRefusesTrainingActions) {
  ActionList list = Schedule(forward(2, 2)).materialize();
  list.devices[1].push_back(Action{Op::B, 0, list.params.equal_slice(0), 0, 0});
  EXPECT_THROW(validate(list), ScheduleError);
  ActionList step = Schedule(forward(1, 1)).materialize();
  step.devices[0].push_back(Action{Op::STEP, 0, Slice{}, 0, 0});
  EXPECT_THROW(validate(step), ScheduleError);
}

TEST(ForwardSchedule, ValidatorRefusesAMissingForward) {
  ActionList list = Schedule(forward(2, 2)).materialize();
  list.devices[0].pop_back();
  EXPECT_THROW(validate(list), ScheduleError);
}

TEST(ForwardSchedule, RefusesChunksAndRematerialization) {
  ScheduleParams p = forward(2, 2);
  p.chunks = 2;
  EXPECT_THROW(p.validate(), ScheduleError);
  p = forward(2, 2);
  p.rematerialize = true;
  EXPECT_THROW(p.validate(), ScheduleError);
}

}  // namespace
}  // namespace tandem::schedules
