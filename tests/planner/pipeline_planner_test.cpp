#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "planner/cluster.hpp"
#include "planner/pipeline_planner.hpp"
#include "planner/plan_output.hpp"
#include "planner/profile.hpp"

namespace tandem::planner {
namespace {

using schedules::ScheduleKind;

const std::filesystem::path kExamples =
    std::filesystem::path(TANDEM_SOURCE_DIR) / "configs/examples";

Profile example_profile() {
  return load_profile(kExamples / "profile-gpt14.json");
}
Cluster two_hosts() {
  return load_cluster(kExamples / "cluster-2x4.yaml");
}
Cluster four_cpus() {
  return load_cluster(kExamples / "cluster-cpu4.yaml");
}

std::string error_of(const Profile& profile, const Cluster& cluster, const PlanRequest& request) {
  try {
    plan_pipeline(profile, cluster, request);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(PipelinePlanner, ExamplesLoad) {
  EXPECT_EQ(example_profile().layers.size(), 16u);
  EXPECT_EQ(two_hosts().workers(), 8);
  EXPECT_EQ(four_cpus().workers(), 4);
}

TEST(PipelinePlanner, PipeDreamOnTwoHosts) {
  PlanRequest request;
  request.schedule = ScheduleKind::pipedream;
  const PlannedPipeline planned = plan_pipeline(example_profile(), two_hosts(), request);
  const schedules::Plan& plan = planned.plan;
  EXPECT_NO_THROW(plan.validate(16));
  EXPECT_EQ(plan.schedule.kind, ScheduleKind::pipedream);
  int workers = 0;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    workers += static_cast<int>(plan.stages[s].replicas.size());
    EXPECT_LE(planned.stages[s].memory_bytes, two_hosts().memory_per_worker_bytes);
    for (const auto& place : plan.stages[s].replicas) {
      EXPECT_EQ(place.device.rfind("cuda:", 0), 0u);
      EXPECT_TRUE(place.host == "host0" || place.host == "host1");
    }
  }
  EXPECT_LE(workers, 8);
  EXPECT_GT(planned.time_per_minibatch_ms, 0);
  // Eight workers never do worse than the sum of all work on one.
  double total = 0;
  for (const auto& layer : example_profile().layers) total += layer.forward_ms + layer.backward_ms;
  EXPECT_LT(planned.time_per_minibatch_ms, total);
  EXPECT_GE(planned.bubble, 0);
  EXPECT_LT(planned.bubble, 1);
  EXPECT_EQ(planned.noam, planned.stages.front().in_flight);
}

TEST(PipelinePlanner, EqualSlicesPickTheFastestCount) {
  PlanRequest request;
  request.schedule = ScheduleKind::one_f_one_b;
  const PlannedPipeline best = plan_pipeline(example_profile(), four_cpus(), request);
  EXPECT_EQ(best.plan.stages.size(), 4u);
  for (const int m : {1, 2, 5, 8, 32}) {
    request.slices = m;
    const PlannedPipeline fixed = plan_pipeline(example_profile(), four_cpus(), request);
    EXPECT_EQ(fixed.plan.schedule.slices, m);
    EXPECT_LE(best.time_per_minibatch_ms, fixed.time_per_minibatch_ms);
    EXPECT_EQ(fixed.plan.stages, best.plan.stages);  // the partition does not depend on m
  }
}

TEST(PipelinePlanner, UmpipeBeatsOrTiesEqualSlices) {
  PlanRequest request;
  request.schedule = ScheduleKind::umpipe;
  request.ga.population = 24;
  request.ga.generations = 20;
  const PlannedPipeline planned = plan_pipeline(example_profile(), four_cpus(), request);
  EXPECT_GT(planned.equal_slices_ms, 0);
  EXPECT_LE(planned.time_per_minibatch_ms, planned.equal_slices_ms * (1 + 1e-12));
  EXPECT_EQ(planned.plan.schedule.forward_slices.size(), 4u);
  EXPECT_NO_THROW(planned.plan.validate(16));
}

TEST(PipelinePlanner, MoreStagesThanLayersIsAnError) {
  PlanRequest request;
  request.schedule = ScheduleKind::gpipe;
  request.stages = 4;
  Profile small = example_profile();
  small.layers.resize(3);
  EXPECT_EQ(error_of(small, four_cpus(), request), "plan: cannot cut 3 layers into 4 stages");
  request.stages = 0;
  EXPECT_EQ(error_of(small, four_cpus(), request),
            "plan: cannot cut 3 layers into 4 stages (one per worker; pass --stages to use fewer "
            "workers)");
  request.stages = 3;
  EXPECT_EQ(plan_pipeline(small, four_cpus(), request).plan.stages.size(), 3u);
}

TEST(PipelinePlanner, NothingFitsTheMemoryBound) {
  Cluster tight = four_cpus();
  tight.memory_per_worker_bytes = 1e6;
  PlanRequest request;
  request.schedule = ScheduleKind::pipedream;
  const std::string dp = error_of(example_profile(), tight, request);
  EXPECT_NE(dp.find("fits the memory bound"), std::string::npos) << dp;
  request.schedule = ScheduleKind::gpipe;
  const std::string flush = error_of(example_profile(), tight, request);
  EXPECT_NE(flush.find("fits the memory bound"), std::string::npos) << flush;
}

TEST(PipelinePlanner, UnsupportedScheduleIsAnError) {
  PlanRequest request;
  request.schedule = ScheduleKind::interleaved;
  EXPECT_NE(error_of(example_profile(), four_cpus(), request).find("not planned yet"),
            std::string::npos);
}

TEST(PipelinePlanner, PipelineYamlMatchesThePlan) {
  PlanRequest request;
  request.schedule = ScheduleKind::gpipe;
  request.slices = 8;
  const PlannedPipeline planned = plan_pipeline(example_profile(), four_cpus(), request);
  const YAML::Node root = YAML::Load(pipeline_yaml(planned));
  const YAML::Node pipeline = root["pipeline"];
  ASSERT_TRUE(pipeline.IsMap());
  EXPECT_EQ(pipeline["schedule"].as<std::string>(), "gpipe");
  EXPECT_EQ(pipeline["slices"].as<int>(), 8);
  ASSERT_EQ(pipeline["stages"].size(), 4u);
  int next = 0;
  for (std::size_t s = 0; s < 4; ++s) {
    const auto range = pipeline["stages"][s]["layers"].as<std::string>();
    EXPECT_EQ(range.rfind(std::to_string(next), 0), 0u) << range;
    next = planned.plan.stages[s].layers.end;
    EXPECT_EQ(pipeline["stages"][s]["device"].as<std::string>(), "cpu");
  }
  EXPECT_NE(format_plan(planned).find("predicted time per minibatch"), std::string::npos);

  request.schedule = ScheduleKind::umpipe;
  request.ga.population = 8;
  request.ga.generations = 2;
  const PlannedPipeline umpipe = plan_pipeline(example_profile(), four_cpus(), request);
  const YAML::Node slices = YAML::Load(pipeline_yaml(umpipe))["pipeline"]["slices"];
  ASSERT_EQ(slices.size(), 4u);
  int sum = 0;
  for (const auto& b : slices[2]["backward"]) sum += b.as<int>();
  EXPECT_EQ(sum, 32);
}

}  // namespace
}  // namespace tandem::planner
