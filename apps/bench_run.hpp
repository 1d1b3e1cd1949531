#pragma once
// `tandem bench CONFIG`: runs a config's plan for N steps and sets what the run measured
// (samples/s, per-replica utilization, bubble, step time) beside the simulator's prediction for
// the same plan. Stages on cpu train through train::Session, and the prediction takes the
// durations that run itself measured (its trace, apps/trace_summary.hpp), so the ratio is the
// runtime's own overhead beyond compute and message delays. Stages on sim compute nothing: each
// op ends by a timer after its duration (from a profile, or from FLOP counts), and the
// prediction uses exactly those durations.
// The sim pieces are train/sim_run.hpp's.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/model.hpp"
#include "planner/profile.hpp"
#include "schedules/plan.hpp"
#include "train/config.hpp"
#include "train/sim_run.hpp"

namespace tandem::train {
class ProcessGroup;
}  // namespace tandem::train

namespace tandem::apps {

struct BenchOptions {
  std::optional<std::int64_t> steps;  // overrides train.steps
  // Sim stages: per-layer durations from this profile (`tandem profile`); none: FLOP counts.
  std::optional<std::filesystem::path> profile;
  // Stages on cpu: keep the run's trace here (otherwise a temporary file, removed).
  std::optional<std::filesystem::path> trace;
  // The links between stages, for the prediction only (sim stages): each message of a stage's
  // output (activations forward, their gradients back; a graph's, each tensor edge's, on the
  // link it travels: sim_edge_bytes) arrives latency + bytes / bandwidth after it was sent,
  // messages of one link one after another; SYNC takes the longest ring all-reduce of a
  // replicated stage's weights, 2 (r - 1) W / (r B). Default: instant.
  double link_gbit_s = 0;  // 0: unlimited
  double link_latency_us = 0;
  // A multi-process job (sim stages only; not owned): each rank runs its stage replicas, rank 0
  // gathers every replica's statistics and makes the report (the others' reports are empty:
  // `rank` set, no replicas).
  train::ProcessGroup* group = nullptr;
};

struct BenchReplica {
  int device = 0, stage = 0, replica = 0;
  std::string placement;
  std::int64_t actions = 0;
  double busy_s = 0;
  double utilization = 0;            // busy over the pipeline's wall time, in [0, 1]
  double predicted_utilization = 0;  // simulated busy over the simulated makespan
};

struct BenchReport {
  std::string config;
  std::string mode;       // "cpu" (trained through train::Session) or "sim"
  std::string plan_line;  // format_plan_line
  std::string durations;  // where the prediction's durations came from, for people
  std::int64_t steps = 0;
  std::int64_t minibatch = 0;
  std::int64_t actions = 0;  // of the whole run, every replica
  int devices = 0;           // stage replicas
  double seconds = 0;        // the pipeline's wall time
  double samples_per_s = 0;
  double predicted_samples_per_s = 0;
  std::vector<BenchReplica> replicas;  // by device
  double bubble = 0, predicted_bubble = 0;
  // Time per step: sim, makespan / steps; cpu, per update round in the steady state (the
  // trace summary's), or span / steps for runs too short to have one.
  bool steady = false;
  double step_ms = 0, predicted_step_ms = 0;
  double makespan_ms = 0, predicted_makespan_ms = 0;
  double ratio = 0;  // step_ms / predicted_step_ms
  // Activations and gradients the stages sent each other, per step (a graph's skip edges sent
  // straight or relayed show here); what a sim tensor's data would take.
  double bytes_per_step = 0;
  // (makespan - predicted makespan) / (actions / devices): the runtime's cost per action.
  double overhead_us_per_action = 0;
  // Across processes: how many, and the time per replica its device waited beyond what the
  // schedule's own bubble predicts (wall x (predicted - measured utilization)): communication
  // that compute did not hide, plus the runtime's overhead.
  int processes = 1;
  int rank = 0;
  double unhidden_s = 0;  // mean over replicas
};

// Loads nothing: `config` is loaded and checked. Throws train::ConfigError (stages on both sim and
// data devices, or a config train::Session refuses), std::runtime_error (an unreadable profile, or
// one whose layers are not the model's), tandem::actors::PipelineError.
BenchReport run_bench(const train::Config& config, const BenchOptions& options);

// A table for people; the JSON object (what --json prints and the BENCH_JSON line carries).
std::string format_bench(const BenchReport& report);
nlohmann::json bench_to_json(const BenchReport& report);

}  // namespace tandem::apps
