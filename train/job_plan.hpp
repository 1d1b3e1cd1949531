#pragma once
// The one conversion from a job to the plan the pipeline runs (schedules::Plan): the CLI's
// configs and the embedding API's plans both come here.
#include <cstdint>
#include <vector>

#include "schedules/plan.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

// The plan a pipeline layout describes for a model of `num_layers` layers, running
// `minibatches` minibatches of `minibatch` samples. Stages' layer ranges become [first, last + 1);
// interleaved plans keep them, but the pipeline splits the model evenly into stages * chunks
// virtual stages. Throws schedules::ScheduleError.
schedules::Plan pipeline_plan(const PipelineLayout& pipeline, int64_t minibatch, int num_layers,
                              int64_t minibatches);

// The plan a job trains with: its pipeline, or one stage of every layer on the CPU. Throws
// JobError at "pipeline" (what the schedule refuses) or at a stage's device (sim, which holds
// no data to learn from).
schedules::Plan training_plan(const JobSpec& job, int num_layers, int64_t steps);

// True when the job asks for more than one device: several stages or replicas.
bool is_pipeline(const JobSpec& job);

// Equal slices of a minibatch, as the schedules cut them: slice i is [i*B/m, (i+1)*B/m).
std::vector<int64_t> equal_sizes(int64_t samples, int64_t count);

}  // namespace tandem::train
