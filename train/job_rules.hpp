#pragma once
// The rules a job's values must meet, whichever front end made them: the config reader calls
// them on what it read and reports a broken rule at the key's line; the embedding API calls them
// on what the application set and reports the option. Each throws JobError naming the config
// key at fault ("train.optimizer.lr", "cluster.tcp_lanes"), with a message in neither front
// end's words.
#include <cstddef>
#include <cstdint>

#include "models/optimizer.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

// An elastic job's re-plans (train/elastic_job.hpp): far beyond any real run's.
inline constexpr int kMaxReplans = 64;

// lr > 0, weight_decay in [0, 1e6]; sgd: momentum in [0, 1], nesterov with momentum; adamw:
// betas in [0, 1), eps > 0; kind sgd or adamw.
void check_optimizer(const models::OptimizerSpec& optimizer);

// kind constant, cosine or linear; warmup_steps >= 0; final_fraction in [0, 1].
void check_lr_schedule(const LrSchedule& schedule);

// Known transport and collectives; tcp_lanes 1 to the wire's lanes; stall_timeout from 0.5 s to a
// week; max_replans 0 to kMaxReplans.
void check_cluster(const ClusterSpec& cluster);

// UMPIPE's slices of stage `stage`: sizes >= 1 summing to the minibatch.
void check_composition(const SliceComposition& composition, std::int64_t minibatch,
                       std::size_t stage);

}  // namespace tandem::train
