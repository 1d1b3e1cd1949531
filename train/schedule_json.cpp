#include "train/schedule_json.hpp"

#include <string>

#include "schedules/schedule_kind.hpp"

namespace tandem::train {

nlohmann::json schedule_to_json(const schedules::ScheduleParams& p) {
  return {{"kind", std::string(schedules::to_string(p.kind))},
          {"stages", p.stages},
          {"slices", p.slices},
          {"minibatch_size", p.minibatch_size},
          {"replicas", p.replicas},
          {"chunks", p.chunks},
          {"rematerialize", p.rematerialize},
          {"minibatches", p.minibatches},
          {"forward_slices", p.forward_slices},
          {"backward_slices", p.backward_slices}};
}

}  // namespace tandem::train
