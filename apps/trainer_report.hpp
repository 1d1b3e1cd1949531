#pragma once
// What `tandem train` prints and writes: a progress line per log point, a final summary, and
// the metrics file (JSON Lines, one object per log point) that scripts read.
#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train/session.hpp"

namespace tandem::apps {

// "step   100/300  loss 1.2345  acc  93.8%  eval loss 1.3000 acc 92.0%  1234 samples/s  eta 12s"
std::string format_progress(const train::StepRecord& r);
// Several lines: steps and time, final loss (and accuracy), held-out results, and for Markov
// text the entropy rate and the gap to it.
std::string format_summary(const train::TrainSummary& s);
// {"step":100,"steps":300,"loss":...,"accuracy":...,"samples_per_s":...,"elapsed_s":...,
//  "eta_s":...,"lr":...,"eval_loss":...,"eval_accuracy":...}; absent values are left out.
nlohmann::json to_json(const train::StepRecord& r);

// "pipeline: schedule pipedream, 4 stages: layers 0-1 | 2-3 | 4-5 | 6-7, replicas 1-1-1-1, 1
// slice of minibatch 32"
std::string format_plan_line(const schedules::Plan& plan);

// One row per stage replica: stage, replica, device, busy s, idle s (wall - busy), busy share,
// peak weight versions, peak kept activations.
std::string format_stage_table(const train::TrainSummary& summary);

struct TrainCommand {
  std::optional<std::filesystem::path> config;  // none: the embedded default (default_config())
  std::vector<std::string> sets;                // --set KEY=VALUE overrides of the config
  std::optional<std::filesystem::path> metrics_json;
  std::optional<int64_t> steps;
  std::optional<std::filesystem::path> trace;  // Chrome trace of the run
  std::optional<std::filesystem::path> checkpoint_dir;
  int64_t checkpoint_every = 0;  // steps; 0: a checkpoint at the end only
  std::optional<std::filesystem::path> resume;
  bool quiet = false;
  bool elastic = false;  // overrides cluster.elastic to true
  // Join the running elastic job at its door "host:port" (train/elastic_job.hpp).
  std::optional<std::string> join;
};

// `tandem train`: loads the config, trains through the pipeline runtime (one stage when the
// config has no pipeline section), prints progress (unless quiet), the summary and the
// per-stage table to `out`, writes the metrics file and checkpoints; Ctrl-C stops at the next
// stop boundary. Throws train::ConfigError /
// DataFileError / actors::PipelineError / std::runtime_error.
train::TrainSummary run_train_command(const TrainCommand& command, std::ostream& out);

}  // namespace tandem::apps
