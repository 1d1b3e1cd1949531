#include "schedules/plan.hpp"

#include <cctype>
#include <string>
#include <utility>

#include "schedules/schedule_error.hpp"

namespace tandem::schedules {
namespace {

[[noreturn]] void fail(std::size_t stage, const std::string& what) {
  throw ScheduleError("plan: stage " + std::to_string(stage) + ": " + what);
}

bool valid_device(const std::string& device) {
  if (device == "cpu" || device == "sim") return true;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 9) return false;
  for (std::size_t i = 5; i < device.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(device[i]))) return false;
  }
  return true;
}

}  // namespace

Plan Plan::make(std::vector<StagePlan> stages, ScheduleParams schedule) {
  Plan plan;
  plan.stages = std::move(stages);
  plan.schedule = std::move(schedule);
  plan.schedule.stages = static_cast<int>(plan.stages.size());
  plan.schedule.replicas.clear();
  for (const auto& s : plan.stages) {
    plan.schedule.replicas.push_back(static_cast<int>(s.replicas.size()));
  }
  return plan;
}

void Plan::validate(int num_layers) const {
  if (stages.empty()) throw ScheduleError("plan: no stages");
  int next = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const auto& st = stages[s];
    if (st.layers.begin != next) {
      fail(s, "layers start at " + std::to_string(st.layers.begin) + ", expected " +
                  std::to_string(next) + " (stages must be contiguous from layer 0)");
    }
    if (st.layers.end <= st.layers.begin) {
      fail(s, "empty layer range [" + std::to_string(st.layers.begin) + "," +
                  std::to_string(st.layers.end) + ")");
    }
    next = st.layers.end;
    if (st.replicas.empty()) fail(s, "no replicas");
    for (std::size_t r = 0; r < st.replicas.size(); ++r) {
      const auto& place = st.replicas[r];
      if (!valid_device(place.device)) {
        fail(s, "replica " + std::to_string(r) + ": device '" + place.device +
                    "' is not cpu, sim or cuda:N");
      }
      for (char c : place.host) {
        if (std::isspace(static_cast<unsigned char>(c))) {
          fail(s, "replica " + std::to_string(r) + ": host '" + place.host + "' has a space");
        }
      }
    }
    if (schedule.stages == static_cast<int>(stages.size()) &&
        (schedule.replicas.empty() || schedule.replicas.size() == stages.size()) &&
        schedule.replicas_of(static_cast<int>(s)) != static_cast<int>(st.replicas.size())) {
      fail(s, "has " + std::to_string(st.replicas.size()) + " replicas but the schedule says " +
                  std::to_string(schedule.replicas_of(static_cast<int>(s))));
    }
  }
  if (num_layers > 0 && next != num_layers) {
    throw ScheduleError("plan: the stages end at layer " + std::to_string(next) +
                        " but the model has " + std::to_string(num_layers) + " layers");
  }
  if (schedule.stages != static_cast<int>(stages.size())) {
    throw ScheduleError("plan: " + std::to_string(stages.size()) + " stages but the schedule has " +
                        std::to_string(schedule.stages));
  }
  schedule.validate();
}

std::vector<LayerRange> virtual_stage_layers(const Plan& plan, int num_layers,
                                             std::span<const LayerRange> chunk_layers) {
  const ScheduleParams& p = plan.schedule;
  if (!chunk_layers.empty()) {
    const int v = p.stages * p.chunks;
    if (static_cast<int>(chunk_layers.size()) != v) {
      throw ScheduleError(std::to_string(chunk_layers.size()) + " chunk layer ranges for " +
                          std::to_string(v) + " virtual stages");
    }
    int next = 0;
    for (const LayerRange& r : chunk_layers) {
      if (r.begin != next || r.end <= r.begin) {
        throw ScheduleError("chunk layer ranges must tile the model");
      }
      next = r.end;
    }
    if (next != num_layers) {
      throw ScheduleError("chunk layer ranges end at layer " + std::to_string(next));
    }
    return {chunk_layers.begin(), chunk_layers.end()};
  }
  std::vector<LayerRange> out;
  if (p.chunks == 1) {
    for (const StagePlan& s : plan.stages) out.push_back(s.layers);
    return out;
  }
  const int v = p.stages * p.chunks;
  if (num_layers < v) {
    throw ScheduleError("the model's " + std::to_string(num_layers) + " layers cannot fill " +
                        std::to_string(v) + " virtual stages");
  }
  for (int i = 0; i < v; ++i) out.push_back({i * num_layers / v, (i + 1) * num_layers / v});
  return out;
}

}  // namespace tandem::schedules
