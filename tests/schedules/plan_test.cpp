#include "schedules/plan.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedules/schedule_error.hpp"
#include "schedules/schedule_kind.hpp"

namespace tandem::schedules {
namespace {

Plan sample() {
  ScheduleParams sp;
  sp.kind = ScheduleKind::pipedream;
  return Plan::make(
      {StagePlan{{0, 5}, {Placement{"", "cpu"}, Placement{"", "cuda:0"}}},
       StagePlan{{5, 10}, {Placement{"host1", "cuda:1"}}}, StagePlan{{10, 16}, {Placement{}}}},
      sp);
}

std::string error_of(const Plan& plan, int layers = 0) {
  try {
    plan.validate(layers);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

TEST(SchedulePlan, MakeFillsTheScheduleShape) {
  const Plan plan = sample();
  EXPECT_EQ(plan.schedule.stages, 3);
  EXPECT_EQ(plan.schedule.replicas, (std::vector<int>{2, 1, 1}));
  EXPECT_NO_THROW(plan.validate(16));
}

TEST(SchedulePlan, ErrorsNameTheStageAndField) {
  auto expect = [](const std::string& err, const std::string& needle) {
    EXPECT_NE(err.find(needle), std::string::npos) << "'" << needle << "' not in: " << err;
  };
  expect(error_of(sample(), 17), "the stages end at layer 16 but the model has 17 layers");
  Plan gap = sample();
  gap.stages[1].layers.begin = 6;
  expect(error_of(gap), "stage 1: layers start at 6, expected 5");
  Plan empty = sample();
  empty.stages[2].layers = {10, 10};
  expect(error_of(empty), "stage 2: empty layer range [10,10)");
  Plan device = sample();
  device.stages[0].replicas[1].device = "gpu0";
  expect(error_of(device), "stage 0: replica 1: device 'gpu0'");
  Plan host = sample();
  host.stages[1].replicas[0].host = "a b";
  expect(error_of(host), "host 'a b'");
  Plan disagree = sample();
  disagree.schedule.replicas = {1, 1, 1};
  expect(error_of(disagree), "stage 0: has 2 replicas but the schedule says 1");
  Plan count = sample();
  count.schedule.stages = 2;
  count.schedule.replicas.clear();
  expect(error_of(count), "3 stages but the schedule has 2");
  Plan bad = sample();
  bad.schedule.slices = 2;
  expect(error_of(bad), "PipeDream runs whole minibatches");
  Plan none;
  expect(error_of(none), "no stages");
}

// The one table of schedule names: a pipeline may name each of them, and each reads back as its
// kind; naive and custom are not a pipeline's.
// Chunked plans: an even split by default, or the ranges given, which must tile the model.
TEST(SchedulePlan, VirtualStageLayersSplitEvenlyOrTakeTheRangesGiven) {
  ScheduleParams sp;
  sp.kind = ScheduleKind::interleaved;
  sp.chunks = 2;
  const Plan plan =
      Plan::make({StagePlan{{0, 4}, {Placement{}}}, StagePlan{{4, 8}, {Placement{}}}}, sp);
  EXPECT_EQ(virtual_stage_layers(plan, 8),
            (std::vector<LayerRange>{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  const std::vector<LayerRange> given{{0, 1}, {1, 5}, {5, 7}, {7, 8}};
  EXPECT_EQ(virtual_stage_layers(plan, 8, given), given);
  const auto refusal = [&plan](std::vector<LayerRange> ranges) {
    try {
      (void)virtual_stage_layers(plan, 8, ranges);
    } catch (const ScheduleError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refusal({{0, 2}, {2, 4}, {4, 8}}).find("3 chunk layer ranges for 4"),
            std::string::npos);
  EXPECT_NE(refusal({{0, 2}, {3, 4}, {4, 6}, {6, 8}}).find("must tile"), std::string::npos);
  EXPECT_NE(refusal({{0, 2}, {2, 4}, {4, 6}, {6, 7}}).find("end at layer 7"), std::string::npos);
  EXPECT_THROW((void)virtual_stage_layers(plan, 3), ScheduleError);
}

TEST(ScheduleKindNames, PipelineNamesAreTheTablesButNaiveAndCustom) {
  const std::vector<std::string_view> names = pipeline_schedule_names();
  EXPECT_EQ(names,
            (std::vector<std::string_view>{"gpipe", "1f1b", "pipedream", "pipedream-vsync", "2bw",
                                           "interleaved", "zb-h1", "zb-v", "zb-2p", "umpipe"}));
  for (const std::string_view name : names) EXPECT_EQ(to_string(parse_schedule_kind(name)), name);
}

}  // namespace
}  // namespace tandem::schedules
