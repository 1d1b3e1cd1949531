#pragma once
// A Chrome trace (the JSON that ui.perfetto.dev and chrome://tracing open) of one pipeline run:
// one track per stage replica with every action as a slice named by its schedule token ("F3",
// "B0[2:5)c1", "STEP2"), a loader track (one slice per minibatch it builds and sends), a
// coordinator track (one slice per loss report), and flow arrows from every action that sends a
// tensor to the action that receives it. The pairs come from schedules::Routing after the run,
// so the actors only report what ran and when. Beside "traceEvents" the file holds a "tandem"
// object with the plan, so `tandem trace summarize` can simulate the same schedule, and where
// the trace's zero lies on steady_clock and system_clock, so `tandem trace merge` can put the
// traces of a job's processes on one clock (train/trace_merge.hpp).
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/pipeline_event.hpp"
#include "actors/stage_event.hpp"
#include "schedules/action_list.hpp"
#include "schedules/plan.hpp"
#include "schedules/routing.hpp"

namespace tandem::train {

class PipelineTrace {
 public:
  PipelineTrace() = default;
  PipelineTrace(const PipelineTrace&) = delete;
  PipelineTrace& operator=(const PipelineTrace&) = delete;

  // Records the run that `spec` describes: sets spec.observer (calling the one already there
  // first) and spec.on_event. Call once spec.plan and spec.order are final; the trace must
  // outlive the run.
  void attach(actors::PipelineSpec& spec);

  // {"traceEvents": [...], "displayTimeUnit": "ns", "tandem": {...}}. Times count from the
  // run's first event.
  nlohmann::json to_json() const;
  // Throws std::runtime_error naming the path.
  void write(const std::filesystem::path& path) const;

  std::size_t actions() const;

 private:
  struct Action {
    int device;
    schedules::Action action;
    std::int64_t version;
    std::chrono::steady_clock::time_point start, end;
    Event device_started, device_done;  // an asynchronous device's (StageEvent)
  };

  mutable std::mutex mu_;
  std::optional<schedules::Plan> plan_;
  std::optional<schedules::ActionList> order_;
  std::vector<schedules::TensorEdge> edges_;  // a graph model's (empty for a chain)
  std::vector<Action> actions_;
  std::vector<actors::PipelineEvent> events_;
};

// The schedule's parameters back from the "tandem" object, which holds them as
// train/schedule_json.hpp writes them (throws std::runtime_error naming the field).
schedules::ScheduleParams schedule_from_json(const nlohmann::json& json);

// A slice's name: the action's token in the schedule's text form, with the round written out
// for STEP and SYNC ("STEP3"), so that every name parses back as a token.
std::string trace_action_name(const schedules::ScheduleParams& params,
                              const schedules::Action& action);

// A flow arrow's name: what the tensor it draws is ("activation", "gradient", ...).
const char* trace_port_name(schedules::Port port);

}  // namespace tandem::train
