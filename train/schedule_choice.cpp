#include "train/schedule_choice.hpp"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "schedules/schedule_kind.hpp"
#include "train/config_flop_profile.hpp"
#include "train/job_error.hpp"

namespace tandem::train {

namespace {

std::vector<schedules::StagePlan> cut_of(const PipelineLayout& p, int num_layers) {
  std::vector<schedules::StagePlan> cut;
  for (const StageSpec& st : p.stages) {
    schedules::StagePlan sp;
    sp.layers = {static_cast<int>(st.first_layer),
                 static_cast<int>(st.last_layer < 0 ? num_layers : st.last_layer + 1)};
    sp.replicas.clear();  // a StagePlan starts with one default placement
    for (int64_t r = 0; r < st.replicas; ++r) {
      const auto i = static_cast<std::size_t>(r);
      const Device& d = i < st.devices.size() ? st.devices[i] : st.device;
      sp.replicas.push_back(schedules::Placement{"", d.str()});
    }
    cut.push_back(std::move(sp));
  }
  return cut;
}

}  // namespace

void adopt_slices(const schedules::Plan& plan, PipelineLayout& p) {
  if (!p.slices.empty() || !p.compositions.empty()) return;
  if (!plan.schedule.forward_slices.empty()) {
    for (std::size_t s = 0; s < plan.schedule.forward_slices.size(); ++s) {
      p.compositions.push_back({plan.schedule.forward_slices[s], plan.schedule.backward_slices[s]});
    }
  } else if (plan.schedule.slices > 1) {
    p.slices = {plan.schedule.slices};
  }
}

planner::RankingOptions ranking_options(const PipelineLayout& pipeline, std::int64_t minibatch,
                                        bool allow_async) {
  planner::RankingOptions options;
  options.allow_async = allow_async;
  options.minibatch = static_cast<int>(minibatch);
  if (!pipeline.slices.empty()) options.slices = static_cast<int>(pipeline.slices.front());
  return options;
}

const schedules::Plan& adopt_pick(const planner::ScheduleRanking& ranking,
                                  PipelineLayout& pipeline) {
  const planner::RankedSchedule* pick = ranking.pick();
  if (pick == nullptr) {
    std::string reasons;
    for (const planner::RankedSchedule& e : ranking.entries) {
      reasons += "\n  " + e.name() + ": " + e.dropped;
    }
    throw JobError("pipeline.schedule", "auto found no schedule for this pipeline:" + reasons);
  }
  pipeline.schedule = std::string(schedules::to_string(pick->kind));
  pipeline.rematerialize = pick->rematerialize;
  pipeline.chunks = pick->planned.plan.schedule.chunks;
  adopt_slices(pick->planned.plan, pipeline);
  return pick->planned.plan;
}

planner::ScheduleRanking choose_schedule(PipelineLayout& pipeline, std::int64_t minibatch,
                                         const models::Model& model,
                                         const ScheduleChoiceInputs& inputs) {
  if (pipeline.schedule != "auto") {
    throw JobError("pipeline.schedule",
                   "choose_schedule: the schedule is '" + pipeline.schedule + "', not auto");
  }
  const std::vector<schedules::StagePlan> cut = cut_of(pipeline, model.num_layers());
  planner::Cluster cluster;
  if (inputs.cluster) {
    cluster = *inputs.cluster;
  } else {
    int devices = 0;
    for (const schedules::StagePlan& sp : cut) devices += static_cast<int>(sp.replicas.size());
    cluster.levels.push_back({"device", devices, std::numeric_limits<double>::infinity()});
  }
  planner::ScheduleRanking ranking =
      planner::rank_on_cut(inputs.profile ? *inputs.profile : flop_profile(model, minibatch),
                           cluster, cut, ranking_options(pipeline, minibatch, inputs.allow_async));
  (void)adopt_pick(ranking, pipeline);
  return ranking;
}

}  // namespace tandem::train
