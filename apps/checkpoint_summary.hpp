#pragma once
// What `tandem checkpoint inspect` prints about a checkpoint read (and verified) by
// train::read_checkpoint: its step, model, optimizer, plan and parent, and for each stage its
// file, size, the layers it holds and the weight versions and optimizer steps it stores.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "schedules/plan.hpp"
#include "train/checkpoint.hpp"

namespace tandem::apps {

// The layer ranges plan stage `stage` holds: its own, or with an interleaved schedule's chunks
// its chunk of every round (schedules::virtual_stage_layers).
std::vector<schedules::LayerRange> stage_layers(const schedules::Plan& plan, int stage);

// `step_dir` is the step directory read (its files' sizes are counted).
std::string format_checkpoint(const train::Checkpoint& checkpoint,
                              const std::filesystem::path& step_dir);
// The same as one JSON object (`--json`): {"checkpoint", "step", "model", "optimizer", "seed",
// "schedule", "parent", "stages": [{"stage", "file", "bytes", "layers": [[begin, end), ...],
// "replicas": [{"host", "device"}], "weights": [{"replica", "version", "tensors"}], "optimizer":
// [{"replica", "steps", "tensors"}]}], "bytes"}.
nlohmann::json checkpoint_json(const train::Checkpoint& checkpoint,
                               const std::filesystem::path& step_dir);

}  // namespace tandem::apps
