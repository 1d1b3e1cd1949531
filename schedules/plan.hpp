#pragma once
#include <span>
#include <string>
#include <vector>

#include "schedules/schedule_params.hpp"

namespace tandem::schedules {

// Layers [begin, end) of the model.
struct LayerRange {
  int begin = 0;
  int end = 0;
  friend bool operator==(const LayerRange&, const LayerRange&) = default;
};

// Where one replica runs: a device ("cpu", "sim", "cuda:N") on a host (empty: this one).
struct Placement {
  std::string host;
  std::string device = "cpu";
  friend bool operator==(const Placement&, const Placement&) = default;
};

struct StagePlan {
  LayerRange layers;
  std::vector<Placement> replicas{Placement{}};  // one placement per replica
  friend bool operator==(const StagePlan&, const StagePlan&) = default;
};

// Everything needed to spawn a pipeline: produced by the planner or written in a config,
// consumed by the actors. Plain data; `schedule.stages` and `schedule.replicas` describe the
// same stages as `stages` (make() fills them in).
struct Plan {
  std::vector<StagePlan> stages;
  ScheduleParams schedule;

  // A plan whose schedule takes its stage and replica counts from `stages`.
  static Plan make(std::vector<StagePlan> stages, ScheduleParams schedule);

  // Throws ScheduleError naming the stage and field: stages empty, not contiguous from layer 0,
  // empty, (num_layers > 0) not ending at num_layers; a stage without replicas; a malformed
  // device; a schedule that disagrees with the stages or is invalid itself.
  void validate(int num_layers = 0) const;
};

// The layers of every virtual stage (chunk c of stage s at schedule.virtual_stage(s, c)):
// `chunk_layers` when given (one range per virtual stage, tiling the model in order), else the
// plan's stages, or, with several chunks per device, an even split of the model's `num_layers`
// layers into stages * chunks ranges. Throws ScheduleError when the given ranges do not tile
// the model or there are fewer layers than ranges.
std::vector<LayerRange> virtual_stage_layers(const Plan& plan, int num_layers,
                                             std::span<const LayerRange> chunk_layers = {});

}  // namespace tandem::schedules
