#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "schedules/action_list.hpp"
#include "schedules/cost.hpp"
#include "schedules/routing.hpp"

namespace tandem::schedules {

// What one stage (or one chunk of a stage) costs.
struct StageCosts {
  // Durations by slice size. B of a schedule that does not split it also computes the weight
  // gradient, so it takes backward + weight; a split B takes backward and its W takes weight.
  Cost forward, backward, weight;
  // Per sample: activations sent on to the next virtual stage, gradients sent back (a chain's
  // messages; SimulationCosts::edges replaces it for a graph's).
  double output_bytes = 0;
  double weight_bytes = 0;      // one version of the weights
  double activation_bytes = 0;  // per sample: kept from F until B (W when split)
  double input_bytes = 0;       // per sample: all that re-materialization keeps
  double step = 0;              // this stage's (chunk's) part of STEP: its weights' update
};

// A graph model's tensor edge (Routing(params, edges)) and the bytes per sample of its tensor,
// which its gradient, when it has one, shares.
struct EdgeBytes {
  TensorEdge edge;
  double bytes = 0;
};

struct SimulationCosts {
  // One entry per stage, whose chunks (interleaved, zb-v) each take 1/v of it, or one per
  // virtual stage (chunk c of stage s at ScheduleParams::virtual_stage(s, c)).
  std::vector<StageCosts> stages;
  double sync = 0;  // SYNC's duration (the all-reduce)
  double step = 0;  // STEP's duration beyond its stage's own `step`s (those of its chunks)
  // A message between devices arrives latency + bytes / bandwidth after its sender ends.
  double latency = 0;
  double bandwidth = std::numeric_limits<double>::infinity();
  // A graph model's tensors (actors::tensor_edges: straight to each reader, or relayed by the
  // stages in between). Empty: a chain, each virtual stage's output_bytes going to the next.
  // Otherwise activations and gradients follow Routing(params, edges): each route of an edge
  // is one message of bytes x the samples it carries, on the link from its sender's device to
  // its receiver's, and the stages' output_bytes are not sent.
  std::vector<EdgeBytes> edges;
  // With contention, the messages of one link (sender, receiver) travel one after the other,
  // in the sender's order; latency overlaps.
  bool contention = false;

  // Every stage: F takes `forward`, B `backward`, W `weight`; latency c.
  static SimulationCosts uniform(int stages, double forward, double backward, double weight = 0,
                                 double latency = 0);
};

struct OpInterval {
  int device = 0;
  std::uint32_t index = 0;  // position in the device's order
  double start = 0;
  double end = 0;
};

struct SimulationResult {
  double makespan = 0;
  std::vector<double> busy;  // per device
  std::vector<double> idle;  // per device: makespan - busy
  double bubble = 0;         // idle share of devices x makespan
  // Per device: +1 at F, -1 at B (at W where split); chunks of one device count together.
  std::vector<int> peak_in_flight;
  std::vector<std::int64_t> peak_in_flight_samples;
  // Per device, bytes: weights x versions kept + peak activations (stashed inputs with
  // re-materialization, plus one slice's activations during its B).
  std::vector<double> memory;
  std::vector<OpInterval> timeline;  // one per action, device by device; empty if not asked
};

// Times an action list by the rules of docs/architecture.md#simulator-and-golden-numbers: an action
// starts at max(end of the previous action on its device, max over its dependencies of their end,
// plus the message's delay when they ran on another device). Throws ScheduleError on a malformed
// list or a deadlock (naming the stuck actions). Keeps its buffers between runs: reuse one
// Simulator for repeated evaluation.
class Simulator {
 public:
  Simulator();
  Simulator(Simulator&&) noexcept;
  Simulator& operator=(Simulator&&) noexcept;
  ~Simulator();

  const SimulationResult& run(const ActionList& list, const SimulationCosts& costs,
                              bool timeline = true);

 private:
  struct State;  // the compiled graph and the per-action buffers, reused between runs
  std::unique_ptr<State> state_;
};

SimulationResult simulate(const ActionList& list, const SimulationCosts& costs,
                          bool timeline = true);

}  // namespace tandem::schedules
