#include "api/plan_conversion.hpp"

#include <stdexcept>
#include <string>

#include "api/error_translation.hpp"
#include "runtime/device.hpp"
#include "train/job_plan.hpp"

namespace tandem::api {

namespace {

// A replica's device, named by its place in the plan when it is unknown or absent.
Device checked_device(const std::string& d, std::size_t stage, std::size_t replica) {
  const std::string key =
      "plan.stages[" + std::to_string(stage) + "].devices[" + std::to_string(replica) + "]";
  Device device;
  try {
    device = Device::parse(d);
  } catch (const std::invalid_argument& e) {
    throw plan_error(key, e.what());
  }
  // Caught here, before any weights are allocated, rather than by the first allocation.
  if (device.is_cuda() && device.index() >= cuda_device_count()) {
    throw plan_error(
        key, d + " does not exist: " +
                 (cuda_backend_built() ? std::to_string(cuda_device_count()) + " GPU(s) visible"
                                       : std::string("this build has no CUDA backend")));
  }
  return device;
}

}  // namespace

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
    case Schedule::zb_v:
      return K::zb_v;
    case Schedule::zb_2p:
      return K::zb_2p;
    case Schedule::umpipe:
      return K::umpipe;
  }
  throw plan_error("plan.schedule",
                   "unknown tandem::Schedule value " + std::to_string(static_cast<int>(schedule)));
}

train::PipelineLayout pipeline_layout(const Plan& plan) {
  if (plan.stages.empty()) throw plan_error("plan.stages", "no stages");
  train::PipelineLayout layout;
  layout.schedule = std::string(schedules::to_string(schedule_kind(plan.schedule)));
  layout.slices = {plan.slices};
  layout.chunks = plan.chunks;
  layout.rematerialize = plan.rematerialize;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const Stage& st = plan.stages[s];
    if (st.devices.empty()) {
      throw plan_error("plan.stages[" + std::to_string(s) + "].devices",
                       "a stage needs at least one replica");
    }
    train::StageSpec spec;
    spec.first_layer = st.begin;
    spec.last_layer = st.end - 1;
    spec.replicas = static_cast<std::int64_t>(st.devices.size());
    for (std::size_t r = 0; r < st.devices.size(); ++r) {
      spec.devices.push_back(checked_device(st.devices[r], s, r));
    }
    spec.device = spec.devices.front();
    layout.stages.push_back(std::move(spec));
  }
  return layout;
}

schedules::Plan internal_plan(const Plan& plan, std::int64_t minibatches, int num_layers) {
  if (plan.minibatch < 1) {
    throw plan_error("plan.minibatch", "must be >= 1, got " + std::to_string(plan.minibatch));
  }
  if (minibatches < 1) {
    throw option_error("TrainOptions.minibatches",
                       "must be >= 1, got " + std::to_string(minibatches));
  }
  return train::pipeline_plan(pipeline_layout(plan), plan.minibatch, num_layers, minibatches);
}

}  // namespace tandem::api
