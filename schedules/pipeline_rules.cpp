#include "schedules/pipeline_rules.hpp"

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
  return per_minibatch(params.kind) ? action.op == Op::B : action.op == Op::STEP;
}

int admission_releases_per_minibatch(const ScheduleParams& params) {
  return per_minibatch(params.kind) ? 1 : params.replicas_of(0);
}

GradientReduction gradient_reduction(const ScheduleParams& params) {
  return per_minibatch(params.kind) ? GradientReduction::mean : GradientReduction::sum;
}

}  // namespace tandem::schedules
