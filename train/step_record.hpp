#pragma once
// What a Session reports: a record every train.log_every steps (and at every evaluation and
// after the last step), and a summary of the whole run.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "actors/stage_actor.hpp"
#include "train/evaluation.hpp"

namespace tandem::train {

// What each stage replica did over a run (actions, busy time, peak versions and activations).
using actors::StageStats;

struct StepRecord {
  int64_t step = 0;                // steps done (1-based)
  int64_t steps = 0;               // steps of the run
  double loss = 0;                 // mean training loss over the steps since the previous record
  std::optional<double> accuracy;  // training accuracy over the same steps (classification)
  double samples_per_s = 0;        // over the same steps
  double elapsed_s = 0;
  double eta_s = 0;
  double lr = 0;
  // The gradient norm (before clipping) of the window's last step, when the run clips
  // (train.clip_grad_norm).
  std::optional<double> grad_norm;
  // This process's resident memory when the record was made (absent where the system does not
  // say): what shows a leak over a long run.
  std::optional<double> resident_mib;
  std::optional<EvalResult> eval;  // when the held-out data was evaluated at this step
  // Per stage replica, stage by stage: the seconds its actions ran within this record's window
  // (busy / window_s is its utilization; the rest is bubble and waiting for messages).
  struct StageBusy {
    int stage = 0, replica = 0;
    double busy_s = 0;
  };
  std::vector<StageBusy> stages;
  double window_s = 0;
};

struct TrainSummary {
  int64_t steps = 0;          // steps done (fewer than asked when stopped)
  int64_t first_step = 0;     // a resumed run: the checkpoint's step
  std::vector<float> losses;  // every step's training loss (from first_step on)
  double final_loss = 0;      // mean over the last log window
  std::optional<double> final_accuracy;
  std::optional<EvalResult> eval;  // after the last step (with train.eval)
  // Markov text: the generator's entropy rate and the best loss reachable on its windows.
  std::optional<double> entropy_rate;
  std::optional<double> optimal_loss;
  double seconds = 0;
  double samples_per_s = 0;
  uint64_t params_fingerprint = 0;
  std::string model;
  std::string train_data;
  // One per stage replica, stage by stage: over all segments of the run.
  std::vector<actors::StageStats> stages;
  double pipeline_seconds = 0;  // the pipeline's wall time (busy + idle of a replica)
  std::vector<std::filesystem::path> checkpoints;  // written, in order
  bool stopped = false;                            // ended early by request_stop()
};

}  // namespace tandem::train
