#include <stdexcept>
#include <string>

#include "api/plan_conversion.hpp"
#include "tandem/tandem.hpp"

namespace tandem {

std::string_view to_string(Schedule schedule) {
  if (schedule == Schedule::automatic) return "auto";
  return schedules::to_string(api::schedule_kind(schedule));
}

Plan Plan::split_evenly(const Model& model, int stages, Schedule schedule, std::int64_t minibatch,
                        int slices) {
  const int n = model.num_layers();
  if (stages < 1 || stages > n) {
    throw std::invalid_argument("Plan::split_evenly: " + std::to_string(stages) +
                                " stages for a model of " + std::to_string(n) + " layers (1 to " +
                                std::to_string(n) + ")");
  }
  Plan plan;
  plan.schedule = schedule;
  plan.minibatch = minibatch;
  plan.slices = slices;
  int begin = 0;
  for (int s = 0; s < stages; ++s) {
    const int size = n / stages + (s < n % stages ? 1 : 0);
    Stage st;
    st.begin = begin;
    st.end = begin + size;
    plan.stages.push_back(st);
    begin += size;
  }
  return plan;
}

}  // namespace tandem
