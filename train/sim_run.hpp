#pragma once
// A pipeline on sim stages: no data is computed, each op ends by a timer after its duration
// (from a profile, or from FLOP counts), and the simulator's prediction uses exactly those
// durations. What `tandem bench` runs for plans on sim devices, and what
// benches/pipeline_sim_bench.cpp times.
#include <cstdint>
#include <vector>

#include "actors/minibatch_data.hpp"
#include "actors/pipeline.hpp"
#include "models/model.hpp"
#include "models/sim_costs.hpp"
#include "planner/profile.hpp"
#include "schedules/plan.hpp"
#include "schedules/simulator.hpp"
#include "train/config.hpp"
#include "train/step_record.hpp"

namespace tandem::train {

class ProcessGroup;

// Per-layer durations of one op on a slice of `slice_samples` samples, from a profile's
// per-minibatch times, split as the planner splits them (its stage costs): a fixed part plus
// the rest scaled by slice_samples / profile.minibatch; the backward's fixed part is charged to
// the input gradient, the weight gradient gets what remains of it. The sim device charges per
// op, not per sample, so slices of unequal sizes all take the mean size's durations. Each layer's
// step_ms becomes SimCosts::step_ms, which a stage's STEP adds to optimizer_step_ms.
// Throws std::invalid_argument when the slice or the profile's minibatch is not positive.
models::SimCosts sim_costs_from_profile(const planner::Profile& profile, double slice_samples,
                                        double optimizer_step_ms = 0);

// The same from each layer's FLOP count at the dry run's rate (train::kNominalFlopsPerSecond, the
// dry run's): for sim configs run without a profile.
models::SimCosts sim_costs_from_flops(const models::Model& model, double slice_samples);

// Exactly what the sim device charges, per virtual stage, as the simulator's costs: F the
// layers' forwards; B their input gradients (none for the model's first layer, whose input
// needs none) and W their weight gradients (added to B where the schedule does not split it);
// STEP optimizer_step_ms plus each stage's layers' step_ms; SYNC and message latency 0
// (in-process, messages only).
schedules::SimulationCosts sim_simulation_costs(const models::SimCosts& sim,
                                                const std::vector<schedules::LayerRange>& vstages);

// A graph model's tensor edges on `vstages` (actors/stage_edges.hpp: straight to each reader, or
// relayed), each with what its sim tensor weighs on the wire per sample: `wire_bytes` an element
// (4 for f32, 2 for bf16: pipeline.wire_dtype). Empty for a chain.
std::vector<schedules::EdgeBytes> sim_edge_bytes(const models::Model& model,
                                                 const std::vector<schedules::LayerRange>& vstages,
                                                 bool relay, double wire_bytes = 4);

// A spec that runs `plan` with the sim device's durations `sim`; the replicas' placements are
// the plan's (they should be on sim).
actors::PipelineSpec sim_pipeline_spec(const models::Model& model, const schedules::Plan& plan,
                                       const models::SimCosts& sim, actors::DataSource data);

// What a sim run measured: its minibatches, wall time and every stage replica's statistics
// (rank 0 of a multi-process job: every rank's).
struct SimRun {
  std::int64_t minibatches = 0;
  double seconds = 0;
  std::vector<StageStats> stages;
};

// Runs `plan` of `config`'s model on sim stages with durations `sim`, over `group` when it is a
// multi-process job (null: one process), as one segment of train::run_segment.
SimRun run_sim(const Config& config, const models::Model& model, const schedules::Plan& plan,
               const models::SimCosts& sim, ProcessGroup* group);

}  // namespace tandem::train
