#include "train/partition_choice.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/pipeline_planner.hpp"
#include "schedules/schedule_kind.hpp"
#include "train/job_error.hpp"
#include "train/schedule_choice.hpp"

namespace tandem::train {
namespace {

// The stages of a plan the planner made, as a job lists them.
void adopt_stages(const schedules::Plan& plan, PipelineLayout& p) {
  std::vector<std::string> hosts;
  for (const schedules::StagePlan& sp : plan.stages) {
    StageSpec st;
    st.first_layer = sp.layers.begin;
    st.last_layer = sp.layers.end - 1;
    st.replicas = static_cast<int64_t>(sp.replicas.size());
    for (const schedules::Placement& pl : sp.replicas) {
      if (!pl.host.empty()) {
        auto it = std::find(hosts.begin(), hosts.end(), pl.host);
        if (it == hosts.end()) it = hosts.insert(hosts.end(), pl.host);
        st.ranks.push_back(static_cast<int64_t>(it - hosts.begin()));
      }
      try {
        st.devices.push_back(Device::parse(pl.device));
      } catch (const std::invalid_argument& e) {
        throw JobError("pipeline.cluster", e.what());
      }
    }
    st.device = st.devices.front();
    if (st.replicas == 1) st.devices.clear();
    p.stages.push_back(st);
  }
  adopt_slices(plan, p);
}

}  // namespace

std::optional<planner::ScheduleRanking> plan_partition(PipelineLayout& pipeline,
                                                       std::int64_t minibatch,
                                                       const PartitionInputs& inputs) {
  if (!pipeline.stages.empty()) {
    throw JobError("pipeline.stages", "give stages or partition: auto, not both");
  }
  if (pipeline.schedule == "auto") {
    planner::ScheduleRanking ranking = planner::rank_planned(
        inputs.profile, inputs.cluster, ranking_options(pipeline, minibatch, inputs.allow_async));
    adopt_stages(adopt_pick(ranking, pipeline), pipeline);
    return ranking;
  }
  planner::PlanRequest request;
  request.schedule = schedules::parse_schedule_kind(pipeline.schedule);
  request.minibatch = static_cast<int>(minibatch);
  if (!pipeline.slices.empty()) request.slices = static_cast<int>(pipeline.slices.front());
  planner::PlannedPipeline planned;
  try {
    planned = planner::plan_pipeline(inputs.profile, inputs.cluster, request);
  } catch (const std::exception& e) {
    throw JobError("pipeline.partition", std::string("the planner found no plan: ") + e.what());
  }
  adopt_stages(planned.plan, pipeline);
  return std::nullopt;
}

}  // namespace tandem::train
