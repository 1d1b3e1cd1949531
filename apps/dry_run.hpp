#pragma once
// `tandem train --dry-run CONFIG`: the config is loaded and validated as for training (nothing
// is allocated), then the plan it describes is printed with the simulator's prediction of the
// time per minibatch and each stage's memory, and nothing runs.
#include <ostream>

#include "train/config.hpp"
#include "train/config_flop_profile.hpp"

namespace tandem::apps {

// Durations of the prediction come from each layer's FLOP count at this rate per device.
inline constexpr double kDryRunFlopsPerSecond = train::kNominalFlopsPerSecond;

struct DryRunPrediction {
  double step_ms = 0;                // per minibatch, in the steady state for PipeDream-like
  double bubble = 0;                 // idle share of the devices
  std::vector<double> busy_ms;       // per device, over the simulated minibatches
  std::vector<double> memory_bytes;  // per device: weights, gradients, optimizer state, stashes
  // Per stage, the layers the runtime gives it ("0-1,8-9": its chunks, when it holds several).
  std::vector<std::string> stage_layers;
};

// The prediction for `config`'s pipeline (a config without one: one stage on cpu).
DryRunPrediction predict(const train::Config& config);

// Prints the plan and the prediction to `out`; with `schedule: auto`, first the ranking.
void dry_run(const train::Config& config, std::ostream& out);

}  // namespace tandem::apps
