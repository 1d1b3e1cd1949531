#pragma once
// What a stage holds at the end of a pipeline segment (its latest weights, optimizer state and
// the older weight versions the next segment replays) and how its replicas did, as one byte
// string: how the processes of a multi-process job hand their stages to rank 0, which writes
// checkpoints, evaluates and reports for the whole model. A safetensors file in memory: the
// tensors under "<kind>:<stage>:<version>:<weight name>", the rest as metadata.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/stage_actor.hpp"
#include "models/param_set.hpp"

namespace tandem::train {

struct StageState {
  int stage = 0;
  models::ParamSet latest;
  actors::OptimizerState optimizer;
  std::map<std::int64_t, models::ParamSet> older;  // by version
};

struct StageStateBundle {
  std::vector<StageState> stages;
  std::vector<actors::StageStats> stats;  // of stage replicas
};

std::vector<std::byte> encode_stage_states(const StageStateBundle& bundle);
// Throws std::runtime_error naming what is malformed (models::SafetensorsError for the file).
StageStateBundle decode_stage_states(std::span<const std::byte> bytes);

}  // namespace tandem::train
