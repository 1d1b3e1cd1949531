#pragma once
// What `tandem train` prints and writes: a progress line per log point, a final summary, and
// the metrics file (JSON Lines, one object per log point) that scripts read.
#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "apps/trainer.hpp"

namespace tandem::apps {

// "step   100/300  loss 1.2345  acc  93.8%  eval loss 1.3000 acc 92.0%  1234 samples/s  eta 12s"
std::string format_progress(const StepRecord& r);
// Several lines: steps and time, final loss (and accuracy), held-out results, and for Markov
// text the entropy rate and the gap to it.
std::string format_summary(const TrainSummary& s);
// {"step":100,"steps":300,"loss":...,"accuracy":...,"samples_per_s":...,"elapsed_s":...,
//  "eta_s":...,"lr":...,"eval_loss":...,"eval_accuracy":...}; absent values are left out.
nlohmann::json to_json(const StepRecord& r);

struct TrainCommand {
  std::optional<std::filesystem::path> config;  // none: the embedded default (default_config())
  std::optional<std::filesystem::path> metrics_json;
  std::optional<int64_t> steps;
  bool quiet = false;
};

// `tandem train`: loads the config, trains (through the pipeline runtime when the config has
// several stages or replicas, else on one device), prints progress (unless quiet), the summary
// and for pipelines the per-stage table to `out`, writes the metrics file. Throws ConfigError /
// DataFileError / actors::PipelineError / std::runtime_error.
TrainSummary run_train_command(const TrainCommand& command, std::ostream& out);

}  // namespace tandem::apps
