#include "schedules/weight_versions.hpp"

#include <algorithm>

namespace tandem::schedules {

int warmup(const ScheduleParams& params, int stage) {
  const int before = params.device_of(stage, 0);
  return (params.total_replicas() - 1 - before) / params.replicas_of(stage);
}

std::int64_t weight_version(const ScheduleParams& params, int stage, std::int64_t minibatch) {
  switch (params.kind) {
    case ScheduleKind::pipedream:
      return std::max<std::int64_t>(0,
                                    minibatch / params.replicas_of(stage) - warmup(params, stage));
    case ScheduleKind::pipedream_vsync:
      return std::max<std::int64_t>(0, minibatch - (params.stages - 1));
    case ScheduleKind::pipedream_2bw:
      return std::max<std::int64_t>(0, minibatch - 1);
    case ScheduleKind::forward:
      return 0;  // nothing updates: every minibatch reads the given weights
    default:
      return minibatch;
  }
}

int update_delay(const ScheduleParams& params, int stage) {
  switch (params.kind) {
    case ScheduleKind::pipedream:
      return warmup(params, stage);
    case ScheduleKind::pipedream_vsync:
      return params.stages - 1;
    case ScheduleKind::pipedream_2bw:
      return 1;
    default:
      return 0;
  }
}

int versions_kept(const ScheduleParams& params, int stage) {
  switch (params.kind) {
    case ScheduleKind::pipedream:
      return warmup(params, stage) + 1;
    case ScheduleKind::pipedream_vsync:
      return params.stages;
    case ScheduleKind::pipedream_2bw:
      return 2;
    default:
      return 1;
  }
}

int noam(const ScheduleParams& params) {
  switch (params.kind) {
    case ScheduleKind::pipedream:
    case ScheduleKind::pipedream_vsync:
      return warmup(params, 0) + 1;
    case ScheduleKind::pipedream_2bw:
      return 2;
    default:
      return 1;
  }
}

}  // namespace tandem::schedules
