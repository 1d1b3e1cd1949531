#include "planner/pipeline_planner.hpp"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "planner/cluster.hpp"
#include "planner/plan_output.hpp"
#include "planner/profile.hpp"
#include "schedules/schedule.hpp"
#include "schedules/validator.hpp"
#include "schedules/weight_versions.hpp"

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

TEST(PipelinePlanner, PipeDreamPlansAreSimulated) {
  // A straight pipeline (vertical sync: one worker per stage, no SYNC) in the steady state
  // takes at least its slowest stage's compute per minibatch, and the DP's estimate is that
  // or a link; the simulator's figure sits next to it.
  PlanRequest request;
  request.schedule = ScheduleKind::pipedream_vsync;
  const PlannedPipeline planned = plan_pipeline(example_profile(), four_cpus(), request);
  ASSERT_GT(planned.simulated_ms, 0);
  double slowest = 0;
  for (const PlannedStage& stage : planned.stages) slowest = std::max(slowest, stage.compute_ms);
  EXPECT_GE(planned.simulated_ms, slowest * (1 - 1e-9));
  EXPECT_LT(planned.simulated_ms, 2 * planned.time_per_minibatch_ms);
  EXPECT_NE(format_plan(planned).find("simulated time per minibatch"), std::string::npos);
  // Replicated stages too (SYNC actions).
  request.schedule = ScheduleKind::pipedream;
  const PlannedPipeline replicated = plan_pipeline(example_profile(), two_hosts(), request);
  EXPECT_GT(replicated.simulated_ms, 0);
  // Flush plans are the simulator's own makespan already.
  request.schedule = ScheduleKind::one_f_one_b;
  EXPECT_EQ(plan_pipeline(example_profile(), four_cpus(), request).simulated_ms, 0);
}

TEST(PipelinePlanner, PipeDreamCostModelUsesEveryWorkerAndItsOwnSyncFactor) {
  // Without sync_factor in the cluster, PipeDream's model uses PipeDream's 4: the same plan as
  // a cluster that says 4, a different time from one that says 2 when replicas sync.
  const auto cluster_with = [](const std::string& factor) {
    return parse_cluster("levels:\n  - {name: gpu, units: 4, bandwidth: 1 GB/s}\n" + factor,
                         "test.yaml");
  };
  PlanRequest request;
  request.cost_model = CostModel::pipedream;
  // Two layers on four workers: some stage must be replicated.
  Profile profile;
  profile.minibatch = 8;
  for (int l = 0; l < 2; ++l) {
    LayerProfile layer;
    layer.forward_ms = 10;
    layer.backward_ms = 20;
    layer.parameter_bytes = 1e8;
    layer.activation_bytes = 1e6;
    profile.layers.push_back(layer);
  }
  const PlannedPipeline unset = plan_pipeline(profile, cluster_with(""), request);
  const PlannedPipeline four = plan_pipeline(profile, cluster_with("sync_factor: 4\n"), request);
  const PlannedPipeline two = plan_pipeline(profile, cluster_with("sync_factor: 2\n"), request);
  EXPECT_EQ(unset.time_per_minibatch_ms, four.time_per_minibatch_ms);
  EXPECT_NE(unset.time_per_minibatch_ms, two.time_per_minibatch_ms);
  int used = 0;
  for (const PlannedStage& stage : unset.stages) used += static_cast<int>(stage.workers.size());
  EXPECT_EQ(used, 4);
  EXPECT_NE(unset.method.find("PipeDream's cost model"), std::string::npos);
  // The default model on the same cluster is another objective.
  request.cost_model = CostModel::overlapped;
  EXPECT_EQ(plan_pipeline(profile, cluster_with(""), request).method.find("cost model"),
            std::string::npos);
}

// Builds the plan's schedule for a finite run and proves it with the schedules' validator.
void validate_schedule(const schedules::Plan& plan, int minibatches) {
  schedules::ScheduleParams params = plan.schedule;
  params.minibatches = minibatches;
  schedules::validate(schedules::Schedule(params).materialize());
}

// Stage weights and per-minibatch kept bytes of the profile's layers [begin, end).
std::pair<double, double> stage_bytes(const Profile& profile, int begin, int end) {
  double weights = 0, kept = 0;
  for (int l = begin; l < end; ++l) {
    weights += profile.layers[l].parameter_bytes;
    kept += profile.layers[l].memory_bytes;
  }
  return {weights, kept};
}

TEST(PipelinePlanner, VerticalSyncOnTwoHostsUsesOneReplicaPerStage) {
  PlanRequest request;
  request.schedule = ScheduleKind::pipedream_vsync;
  const Profile profile = example_profile();
  const Cluster cluster = two_hosts();
  const PlannedPipeline planned = plan_pipeline(profile, cluster, request);
  const schedules::Plan& plan = planned.plan;
  EXPECT_NO_THROW(plan.validate(16));
  EXPECT_EQ(plan.schedule.kind, ScheduleKind::pipedream_vsync);
  const int p = static_cast<int>(plan.stages.size());
  EXPECT_GT(p, 1);
  EXPECT_LE(p, 8);
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(plan.stages[s].replicas.size(), 1u);
    EXPECT_EQ(planned.stages[s].versions, p);
    EXPECT_EQ(planned.stages[s].versions, schedules::versions_kept(plan.schedule, s));
    EXPECT_EQ(planned.stages[s].in_flight, p - s);
    const auto [weights, kept] =
        stage_bytes(profile, plan.stages[s].layers.begin, plan.stages[s].layers.end);
    EXPECT_DOUBLE_EQ(planned.stages[s].memory_bytes, p * weights + (p - s) * kept);
    EXPECT_LE(planned.stages[s].memory_bytes, cluster.memory_per_worker_bytes);
  }
  EXPECT_EQ(planned.noam, schedules::noam(plan.schedule));
  EXPECT_NO_THROW(validate_schedule(plan, 3 * p));
  // Replication can only help PipeDream, which may use it here.
  request.schedule = ScheduleKind::pipedream;
  const PlannedPipeline stashing = plan_pipeline(profile, cluster, request);
  EXPECT_LE(stashing.time_per_minibatch_ms, planned.time_per_minibatch_ms * (1 + 1e-12));
  EXPECT_NO_THROW(validate_schedule(stashing.plan, 3 * stashing.workers));
}

TEST(PipelinePlanner, VerticalSyncCountsPVersionsAgainstTheMemoryBound) {
  // A model whose output layer holds most of the weights: the last stage keeps one version
  // under stashing but p under vertical sync. A bound between what the vertical-sync plan
  // needs and what PipeDream's versions of the same partition would need forces another plan.
  Profile profile = example_profile();
  profile.layers.back().parameter_bytes = 4.0 * (1 << 30);
  Cluster cluster = four_cpus();
  cluster.memory_per_worker_bytes = std::numeric_limits<double>::infinity();
  PlanRequest request;
  request.schedule = ScheduleKind::pipedream_vsync;
  const PlannedPipeline free_plan = plan_pipeline(profile, cluster, request);
  const int p = static_cast<int>(free_plan.plan.stages.size());
  ASSERT_GT(p, 1);
  double vsync_peak = 0, stashing_peak = 0;
  for (int s = 0; s < p; ++s) {
    const auto& layers = free_plan.plan.stages[s].layers;
    const auto [weights, kept] = stage_bytes(profile, layers.begin, layers.end);
    vsync_peak = std::max(vsync_peak, p * weights + (p - s) * kept);
    stashing_peak = std::max(stashing_peak, (p - s) * (weights + kept));
  }
  ASSERT_LT(stashing_peak, vsync_peak);
  cluster.memory_per_worker_bytes = (stashing_peak + vsync_peak) / 2;
  const PlannedPipeline bounded = plan_pipeline(profile, cluster, request);
  EXPECT_NE(bounded.plan.stages, free_plan.plan.stages);
  EXPECT_GE(bounded.time_per_minibatch_ms, free_plan.time_per_minibatch_ms);
  for (const PlannedStage& stage : bounded.stages) {
    EXPECT_LE(stage.memory_bytes, cluster.memory_per_worker_bytes);
  }
  EXPECT_NO_THROW(validate_schedule(bounded.plan, 8));
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
