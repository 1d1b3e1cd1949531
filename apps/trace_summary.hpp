#pragma once
// `tandem trace summarize`: what a pipeline trace (train/pipeline_trace.hpp) says about the run,
// and what the simulator predicts for the same plan when fed the durations the trace measured.
// Measured and predicted step times are computed the same way (time per update round between
// STEPs in steady state), so their ratio says how far the real run is from its schedule: the
// runtime's own overhead beyond the measured compute and message delays.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "schedules/schedule_params.hpp"

namespace tandem::apps {

struct ReplicaUse {
  int device = 0;
  int stage = 0;
  int replica = 0;
  std::string placement;
  std::int64_t actions = 0;
  double busy_s = 0;
  double utilization = 0;  // busy over the run's span, in [0, 1]
};

// Mean measured duration of one action per virtual stage, seconds (0 where none ran). F and B
// scale with the slice's samples when slices differ in size; these are per-slice means.
struct VstageDurations {
  int vstage = 0;
  double forward = 0, backward = 0, weight = 0;
  std::int64_t forwards = 0, backwards = 0, weights = 0;
};

struct TraceSummary {
  std::string source;
  // A job's merged trace (train/trace_merge.hpp): its processes and the clock that aligned them.
  int processes = 1;
  std::string clock;
  schedules::ScheduleParams schedule;  // minibatches: the run's
  std::vector<ReplicaUse> replicas;
  double span_s = 0;  // the first action's start to the last one's end
  double bubble = 0;  // idle share of replicas x span
  std::vector<VstageDurations> durations;
  double step_action_s = 0, sync_action_s = 0;  // mean STEP, SYNC
  // Median gap between a producer's end and its consumer's start where the consumer sat idle
  // waiting for it: the message's delay (with more replicas than cores, also the wait for a
  // free core), fed to the simulator as its latency.
  double message_delay_s = 0;
  std::int64_t loads = 0, losses = 0;
  double loader_busy_s = 0, coordinator_busy_s = 0;

  // Step time: per update round between STEPs after the first quarter of the run (steady);
  // span / minibatches when there are too few STEPs (steady false).
  bool steady = false;
  double step_s = 0;
  double per_minibatch_s = 0;  // span / minibatches
  double predicted_step_s = 0;
  double predicted_per_minibatch_s = 0;
  double predicted_makespan_s = 0;
  double predicted_bubble = 0;
  std::vector<double> predicted_utilization;  // per device: simulated busy / makespan
  double ratio = 0;                           // step_s / predicted_step_s
  // The same without message delays: every replica on a processor of its own, messages
  // instant; the gap to it is what waiting (for messages or, oversubscribed, for a core) costs.
  double ideal_step_s = 0;
};

// Throws std::runtime_error naming `source` and what is missing or malformed; refuses one rank's
// trace of a multi-process job (it holds only that rank's stages), which merge_traces makes one
// trace of the job.
TraceSummary summarize_trace(const nlohmann::json& trace, const std::string& source);
// Reads and summarizes a file; throws std::runtime_error naming the path (missing, not a file,
// too large, not JSON, not a tandem pipeline trace, one rank's trace of a job).
TraceSummary summarize_trace_file(const std::filesystem::path& path);

std::string format_trace_summary(const TraceSummary& summary);

}  // namespace tandem::apps
