#include "api/plan_conversion.hpp"

#include <stdexcept>
#include <string>

#include "runtime/device.hpp"

namespace tandem::api {

schedules::ScheduleKind schedule_kind(Schedule schedule) {
  using K = schedules::ScheduleKind;
  switch (schedule) {
    case Schedule::naive:
      return K::naive;
    case Schedule::gpipe:
      return K::gpipe;
    case Schedule::one_f_one_b:
      return K::one_f_one_b;
    case Schedule::pipedream:
      return K::pipedream;
    case Schedule::pipedream_vsync:
      return K::pipedream_vsync;
    case Schedule::pipedream_2bw:
      return K::pipedream_2bw;
    case Schedule::interleaved:
      return K::interleaved;
    case Schedule::zb_h1:
      return K::zb_h1;
    case Schedule::umpipe:
      return K::umpipe;
  }
  throw std::invalid_argument("unknown tandem::Schedule value " +
                              std::to_string(static_cast<int>(schedule)));
}

schedules::Plan internal_plan(const Plan& plan, std::int64_t minibatches) {
  if (plan.stages.empty()) throw std::invalid_argument("plan.stages: no stages");
  if (plan.minibatch < 1) {
    throw std::invalid_argument("plan.minibatch: must be >= 1, got " +
                                std::to_string(plan.minibatch));
  }
  if (minibatches < 1) {
    throw std::invalid_argument("minibatches: must be >= 1, got " + std::to_string(minibatches));
  }
  std::vector<schedules::StagePlan> stages;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const Stage& st = plan.stages[s];
    if (st.devices.empty()) {
      throw std::invalid_argument("plan.stages[" + std::to_string(s) +
                                  "].devices: a stage needs at least one replica");
    }
    schedules::StagePlan sp;
    sp.layers = {st.begin, st.end};
    sp.replicas.clear();
    for (std::size_t r = 0; r < st.devices.size(); ++r) {
      const std::string& d = st.devices[r];
      const std::string where =
          "plan.stages[" + std::to_string(s) + "].devices[" + std::to_string(r) + "]: ";
      Device device;
      try {
        device = Device::parse(d);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(where + e.what());
      }
      // Caught here, before any weights are allocated, rather than by the first allocation.
      if (device.is_cuda() && device.index() >= cuda_device_count()) {
        throw std::invalid_argument(where + d + " does not exist: " +
                                    (cuda_backend_built()
                                         ? std::to_string(cuda_device_count()) + " GPU(s) visible"
                                         : std::string("this build has no CUDA backend")));
      }
      sp.replicas.push_back(schedules::Placement{"", d});
    }
    stages.push_back(std::move(sp));
  }
  schedules::ScheduleParams params;
  params.kind = schedule_kind(plan.schedule);
  params.slices = plan.slices;
  params.minibatch_size = plan.minibatch;
  params.chunks = plan.chunks;
  params.rematerialize = plan.rematerialize;
  params.minibatches = minibatches;
  return schedules::Plan::make(std::move(stages), std::move(params));
}

}  // namespace tandem::api
