#pragma once
// `tandem bench CONFIG`: runs a config's plan for N steps and sets what the run measured
// (samples/s, per-replica utilization, bubble, step time) beside the simulator's prediction for
// the same plan. Stages on cpu train through train::Session, and the prediction takes the
// durations that run itself measured (its trace, apps/trace_summary.hpp), so the ratio is the
// runtime's own overhead beyond compute and message delays. Stages on sim compute nothing: each
// op ends by a timer after its duration (from a profile, or from FLOP counts), and the
// prediction uses exactly those durations.
//
// The sim pieces are public so that benches/pipeline_sim_bench.cpp times the same thing with
// the same conversion from a profile.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "actors/minibatch_data.hpp"
#include "actors/pipeline.hpp"
#include "models/model.hpp"
#include "models/sim_costs.hpp"
#include "planner/profile.hpp"
#include "schedules/plan.hpp"
#include "schedules/simulator.hpp"
#include "train/config.hpp"

namespace tandem::train {
class ProcessGroup;
}  // namespace tandem::train

namespace tandem::apps {

// Per-layer durations of one op on a slice of `slice_samples` samples, from a profile's
// per-minibatch times, split as the planner splits them (its stage costs): a fixed part plus
// the rest scaled by slice_samples / profile.minibatch; the backward's fixed part is charged to
// the input gradient, the weight gradient gets what remains of it. The sim device charges per
// op, not per sample, so slices of unequal sizes all take the mean size's durations. Each layer's
// step_ms becomes SimCosts::step_ms, which a stage's STEP adds to optimizer_step_ms.
// Throws std::invalid_argument when the slice or the profile's minibatch is not positive.
models::SimCosts sim_costs_from_profile(const planner::Profile& profile, double slice_samples,
                                        double optimizer_step_ms = 0);

// The same from each layer's FLOP count at the dry run's rate (kDryRunFlopsPerSecond): for sim
// configs run without a profile.
models::SimCosts sim_costs_from_flops(const models::Model& model, double slice_samples);

// Exactly what the sim device charges, per virtual stage, as the simulator's costs: F the
// layers' forwards; B their input gradients (none for the model's first layer, whose input
// needs none) and W their weight gradients (added to B where the schedule does not split it);
// STEP optimizer_step_ms plus each stage's layers' step_ms; SYNC and message latency 0
// (in-process, messages only).
schedules::SimulationCosts sim_simulation_costs(const models::SimCosts& sim,
                                                const std::vector<schedules::LayerRange>& vstages);

// A graph model's tensor edges on `vstages` (actors::tensor_edges: straight to each reader, or
// relayed), each with what its sim tensor weighs on the wire per sample: `wire_bytes` an element
// (4 for f32, 2 for bf16: pipeline.wire_dtype). Empty for a chain.
std::vector<schedules::EdgeBytes> sim_edge_bytes(const models::Model& model,
                                                 const std::vector<schedules::LayerRange>& vstages,
                                                 bool relay, double wire_bytes = 4);

// A spec that runs `plan` with the sim device's durations `sim`; the replicas' placements are
// the plan's (they should be on sim).
actors::PipelineSpec sim_pipeline_spec(const models::Model& model, const schedules::Plan& plan,
                                       const models::SimCosts& sim, actors::DataSource data);

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
// one whose layers are not the model's), actors::PipelineError.
BenchReport run_bench(const train::Config& config, const BenchOptions& options);

// A table for people; the JSON object (what --json prints and the BENCH_JSON line carries).
std::string format_bench(const BenchReport& report);
nlohmann::json bench_to_json(const BenchReport& report);

}  // namespace tandem::apps
