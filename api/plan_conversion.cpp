#include "api/plan_conversion.hpp"

#include <stdexcept>
#include <string>

#include "api/error_translation.hpp"
#include "models/delay_correction.hpp"
#include "runtime/device.hpp"

namespace tandem::api {

namespace {

// A replica's device, named by its place in the plan when this build or machine lacks it.
Device checked_device(const Device& device, std::size_t stage, std::size_t replica) {
  // Caught here, before any weights are allocated, rather than by the first allocation.
  if (device.is_cuda() && device.index() >= cuda_device_count()) {
    throw plan_error(
        "plan.stages[" + std::to_string(stage) + "].devices[" + std::to_string(replica) + "]",
        device.str() + " does not exist: " +
            (cuda_backend_built() ? std::to_string(cuda_device_count()) + " GPU(s) visible"
                                  : std::string("this build has no CUDA backend")));
  }
  return device;
}

models::AsyncCorrection async_correction(AsyncCorrection c) {
  switch (c) {
    case AsyncCorrection::none:
      return models::AsyncCorrection::none;
    case AsyncCorrection::weight_prediction:
      return models::AsyncCorrection::weight_prediction;
    case AsyncCorrection::nesterov:
      return models::AsyncCorrection::nesterov;
  }
  throw plan_error("plan.async_correction",
                   "unknown tandem::AsyncCorrection value " + std::to_string(static_cast<int>(c)));
}

// Schedule::automatic chooses what these fields fix, as `schedule: auto` refuses the keys.
void check_automatic(const Plan& plan) {
  if (plan.chunks != 1) {
    throw plan_error("plan.chunks",
                     "Schedule::automatic chooses the chunks (2 for interleaved "
                     "and zb_v)");
  }
  if (plan.rematerialize) {
    throw plan_error("plan.rematerialize",
                     "Schedule::automatic ranks gpipe with and without re-materialization");
  }
  if (!plan.compositions.empty()) {
    throw plan_error("plan.compositions",
                     "Schedule::automatic picks UMPIPE's slices itself where it ranks umpipe");
  }
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
    case Schedule::automatic:
      throw plan_error("plan.schedule",
                       "Schedule::automatic names no schedule until one is chosen");
  }
  throw plan_error("plan.schedule",
                   "unknown tandem::Schedule value " + std::to_string(static_cast<int>(schedule)));
}

Schedule api_schedule(std::string_view name) {
  for (int s = 0; s <= static_cast<int>(Schedule::automatic); ++s) {
    if (to_string(static_cast<Schedule>(s)) == name) return static_cast<Schedule>(s);
  }
  throw Error(ErrorCode::internal, "no tandem::Schedule is named '" + std::string(name) + "'");
}

train::PipelineLayout pipeline_layout(const Plan& plan) {
  if (plan.stages.empty()) throw plan_error("plan.stages", "no stages");
  train::PipelineLayout layout;
  layout.slices = {plan.slices};
  if (plan.schedule == Schedule::automatic) {
    check_automatic(plan);
    layout.schedule = "auto";
    if (plan.slices == 1) layout.slices.clear();  // the ranking picks each schedule's count
  } else {
    if (plan.allow_async) {
      throw plan_error("plan.allow_async", "applies to Schedule::automatic only");
    }
    layout.schedule = std::string(schedules::to_string(schedule_kind(plan.schedule)));
  }
  layout.chunks = plan.chunks;
  layout.rematerialize = plan.rematerialize;
  layout.relay_skips = plan.relay_skips;
  layout.async_correction = async_correction(plan.async_correction);
  if (!plan.compositions.empty()) {
    if (plan.schedule != Schedule::umpipe) {
      throw plan_error("plan.compositions", "unequal slices apply to Schedule::umpipe only");
    }
    if (plan.compositions.size() != plan.stages.size()) {
      throw plan_error("plan.compositions",
                       "gives slices for " + std::to_string(plan.compositions.size()) +
                           " stages, the plan has " + std::to_string(plan.stages.size()));
    }
    layout.slices.clear();  // the compositions say how each stage slices
    for (const SliceSizes& c : plan.compositions) {
      layout.compositions.push_back({c.forward, c.backward});
    }
  }
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const Stage& st = plan.stages[s];
    const std::string at = "plan.stages[" + std::to_string(s) + "]";
    if (st.devices.empty()) throw plan_error(at + ".devices", "a stage needs at least one replica");
    if (!st.ranks.empty() && st.ranks.size() != st.devices.size()) {
      throw plan_error(at + ".ranks", "gives " + std::to_string(st.ranks.size()) + " ranks for " +
                                          std::to_string(st.devices.size()) +
                                          " replicas: one per replica");
    }
    train::StageSpec spec;
    spec.first_layer = st.begin;
    spec.last_layer = st.end - 1;
    spec.replicas = static_cast<std::int64_t>(st.devices.size());
    for (std::size_t r = 0; r < st.devices.size(); ++r) {
      spec.devices.push_back(checked_device(st.devices[r], s, r));
    }
    spec.device = spec.devices.front();
    spec.ranks.assign(st.ranks.begin(), st.ranks.end());
    layout.stages.push_back(std::move(spec));
  }
  return layout;
}

}  // namespace tandem::api
