#pragma once
// The plan an elastic job continues under after losing ranks (train/elastic_job.hpp): the
// model's layers cut evenly into one stage per surviving rank (at most one per layer), each
// stage one replica on the device the job's first stage used, with the job's schedule, slices
// and chunks. Every rank computes it from the same job and world size, and rank 0 announces
// its own so that a rank computing another one stops instead of training a different job.
#include <string>

#include "models/model.hpp"
#include "schedules/plan.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

// `job` re-planned onto `world_size` processes of a model of `num_layers` layers. Throws
// JobError ("pipeline") when the schedule cannot run on that many stages (interleaved chunks
// beyond the layers) or UMPIPE's per-stage slice compositions, which belong to the old cut.
JobSpec replan_job(const JobSpec& job, int num_layers, int world_size);

// The re-planned job must fit: each stage's weights, gradients and optimizer state (a lower
// bound, as config_limits.hpp estimates) within `memory_bytes`, the memory of a rank's machine
// (cpu stages; a cuda stage's device memory is not known here). Throws std::runtime_error
// naming the stage, its layers and both sizes: the job cannot go on with so few ranks.
void check_replan_fits(const JobSpec& job, const models::Model& model, double memory_bytes);

// "0-4 | 5-9 | 10-16": each stage's layers, for the progress line.
std::string describe_cut(const schedules::Plan& plan);

}  // namespace tandem::train
