#pragma once
// `schedule: auto` (a config) and Schedule::automatic (the embedding API) on stages the job
// gives: every schedule that can run that cut is timed by the planner's simulator and the
// fastest becomes the job's. One step of its own, after a job is read or built and before its
// plan is made, so both front ends choose alike.
#include <cstdint>
#include <optional>

#include "models/model.hpp"
#include "planner/cluster.hpp"
#include "planner/profile.hpp"
#include "planner/schedule_ranking.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

struct ScheduleChoiceInputs {
  // Measured times of the model's layers; none: its FLOP counts at a nominal rate
  // (train/config_flop_profile.hpp), which orders schedules but predicts no step time.
  std::optional<planner::Profile> profile;
  // The links between the stages' devices; none: free links and no memory bound.
  std::optional<planner::Cluster> cluster;
  // Rank the asynchronous schedules too (pipedream, pipedream-vsync, 2bw).
  bool allow_async = false;
};

// Where `pipeline` gives no slices, `plan`'s (a planned or picked plan): its equal slice count,
// or UMPIPE's unequal slices per stage.
void adopt_slices(const schedules::Plan& plan, PipelineLayout& pipeline);

// What the ranking takes of a pipeline: its minibatch, its slice count where it gives one (each
// schedule's fastest count otherwise), and whether the asynchronous schedules take part.
planner::RankingOptions ranking_options(const PipelineLayout& pipeline, std::int64_t minibatch,
                                        bool allow_async);

// The ranking's pick becomes `pipeline`'s schedule, chunks, re-materialization and, where
// `pipeline` gives none, slices. Throws JobError at "pipeline.schedule" naming why each
// candidate was dropped when none can run.
const schedules::Plan& adopt_pick(const planner::ScheduleRanking& ranking,
                                  PipelineLayout& pipeline);

// Ranks the schedules on `pipeline`'s own stages (its schedule must be "auto") and adopts the
// pick. `minibatch` is the samples of one pipeline minibatch. Returns the ranking, for a report.
planner::ScheduleRanking choose_schedule(PipelineLayout& pipeline, std::int64_t minibatch,
                                         const models::Model& model,
                                         const ScheduleChoiceInputs& inputs);

}  // namespace tandem::train
