#include "schedules/pipeline_rules.hpp"

#include <numeric>

#include "schedules/weight_versions.hpp"

namespace tandem::schedules {
namespace {

bool per_minibatch(ScheduleKind kind) {
  return kind == ScheduleKind::pipedream || kind == ScheduleKind::pipedream_vsync;
}

}  // namespace

int admission_window(const ScheduleParams& params) {
  if (per_minibatch(params.kind)) return params.replicas_of(0) * (warmup(params, 0) + 1);
  if (params.kind == ScheduleKind::pipedream_2bw) return 2;
  return 1;
}

bool releases_admission(const ScheduleParams& params, int stage, const Action& action) {
  if (stage != 0) return false;
  // No STEP ends a forward-only minibatch: each input-stage F is done with its slice.
  if (params.kind == ScheduleKind::forward) return action.op == Op::F;
  return per_minibatch(params.kind) ? action.op == Op::B : action.op == Op::STEP;
}

int admission_releases_per_minibatch(const ScheduleParams& params) {
  if (params.kind == ScheduleKind::forward) return params.slices;
  return per_minibatch(params.kind) ? 1 : params.replicas_of(0);
}

GradientReduction gradient_reduction(const ScheduleParams& params) {
  return per_minibatch(params.kind) ? GradientReduction::mean : GradientReduction::sum;
}

std::int64_t stop_boundary(const ScheduleParams& params, std::int64_t next) {
  if (!per_minibatch(params.kind)) return next;
  std::int64_t l = 1;
  for (int s = 0; s < params.stages; ++s) l = std::lcm(l, std::int64_t{params.replicas_of(s)});
  return next % l == 0 ? next : (next / l + 1) * l;
}

std::int64_t update_rounds(const ScheduleParams& params, int stage, std::int64_t minibatches) {
  if (!per_minibatch(params.kind)) return minibatches;
  const std::int64_t r = params.replicas_of(stage);
  return minibatches / r + (minibatches % r != 0 ? 1 : 0);  // no overflow near INT64_MAX
}

bool runs_before(const ScheduleParams& params, int stage, const Action& action,
                 std::int64_t cutoff) {
  if (action.op == Op::STEP || action.op == Op::SYNC) {
    return action.minibatch < update_rounds(params, stage, cutoff);
  }
  return action.minibatch < cutoff;
}

}  // namespace tandem::schedules
