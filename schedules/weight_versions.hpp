#pragma once
#include <cstdint>

#include "schedules/schedule_params.hpp"

namespace tandem::schedules {

// Weight-version rules (docs/architecture.md#schedules). Version k of a stage is its weights after
// k updates (STEPs); version 0 is the initial weights.

// PipeDream's warm-up on stage s: floor((R - 1 - sum_{i<s} r_i) / r_s), R = total replicas.
// With one replica per stage this is p - 1 - s, the warm-up of 1F1B.
int warmup(const ScheduleParams& params, int stage);

// The version minibatch `minibatch` (2BW: the batch) uses on `stage` for its F, and for its B
// and W too (stashed). Flush schedules: the minibatch index. PipeDream: max(0, floor(b/r_s) - w_s).
// Vertical sync: max(0, b - (p - 1)). 2BW: max(0, t - 1).
std::int64_t weight_version(const ScheduleParams& params, int stage, std::int64_t minibatch);

// How many updates stale the weights are that a gradient of `stage` is computed with: the
// delay a delay correction predicts across (models/delay_correction.hpp). PipeDream: w_s
// (warmup); vertical sync: p - 1; 2BW: 1; flush schedules: 0.
int update_delay(const ScheduleParams& params, int stage);

// The most versions `stage` holds at once: each version lives from its STEP to its last use,
// the newest one always. Flush: 1; PipeDream: w_s + 1; 2BW: 2; vertical sync: p, because a
// stage publishes a version p - 1 - w_s minibatches before its first use.
int versions_kept(const ScheduleParams& params, int stage);

// How many minibatches (2BW: batches) the input stage admits before the first update:
// PipeDream's NOAM = w_0 + 1 = ceil(R / r_0); 1 for flush schedules; 2 for 2BW.
int noam(const ScheduleParams& params);

}  // namespace tandem::schedules
