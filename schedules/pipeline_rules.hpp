#pragma once
// The rules a running pipeline follows beside the action order and the routing: how many
// minibatches the loader admits, which action hands an admission back, and how replicas
// combine their gradients. Here, not in the actors, so that every schedule's policy lives in
// schedules/ and the actors only execute.
#include "schedules/action.hpp"
#include "schedules/schedule_params.hpp"

namespace tandem::schedules {

// Minibatches (2BW: batches) the loader may have admitted and not yet had back. Flush
// schedules: 1 (the next minibatch starts after the flush). PipeDream and vertical sync:
// NOAM per input-stage replica, r_0 * (w_0 + 1). 2BW: 2.
int admission_window(const ScheduleParams& params);

// Whether `action` on a replica of `stage` hands an admission back to the loader: on the
// input stage, B for PipeDream kinds (each minibatch's last use there), F for `forward` (no
// STEP follows), STEP otherwise.
bool releases_admission(const ScheduleParams& params, int stage, const Action& action);

// How many hand-backs free one minibatch: 1 for PipeDream kinds (one replica runs it), the
// slice count for `forward` (one per F), the input stage's replica count otherwise (every
// replica STEPs).
int admission_releases_per_minibatch(const ScheduleParams& params);

// How SYNC combines the replicas' gradients: flush schedules sum (the replicas' slices make up
// one minibatch, each slice's loss already scaled by the minibatch's size); PipeDream averages
// (each replica's minibatch is its own mean), over the replicas that had a minibatch.
enum class GradientReduction { sum, mean };
GradientReduction gradient_reduction(const ScheduleParams& params);

// Where a run may stop early or resume: the smallest minibatch count >= `next` after which no
// update round is partial on any stage (PipeDream kinds: a multiple of the least common
// multiple of the replica counts; any count for the others), so that the actions of the
// minibatches before it, in the schedule's order, are exactly a shorter run's.
std::int64_t stop_boundary(const ScheduleParams& params, std::int64_t next);

// The update rounds (STEP/SYNC) a replica of `stage` runs over the first `minibatches`
// minibatches (a stop boundary).
std::int64_t update_rounds(const ScheduleParams& params, int stage, std::int64_t minibatches);

// Whether `action` of a replica of `stage` belongs to the first `cutoff` minibatches of the
// run (a stop boundary): those run, the others are dropped when the run stops there.
bool runs_before(const ScheduleParams& params, int stage, const Action& action,
                 std::int64_t cutoff);

}  // namespace tandem::schedules
