#pragma once
#include <cstdint>
#include <vector>

#include "schedules/action.hpp"
#include "schedules/schedule_kind.hpp"

namespace tandem::schedules {

// Everything that defines a schedule. Devices (actors) are numbered stage by stage: device 0 is
// replica 0 of stage 0, then the other replicas of stage 0, then stage 1, ...
struct ScheduleParams {
  ScheduleKind kind = ScheduleKind::gpipe;
  int stages = 1;  // p
  // m: slices per minibatch (2BW: per batch). PipeDream and vertical sync take whole minibatches
  // (m = 1). UMPIPE uses it only for stages without an explicit composition.
  int slices = 1;
  std::int64_t minibatch_size = 0;  // samples; 0: one sample per slice (or a composition's sum)
  std::vector<int> replicas;        // per stage; empty: one replica each
  int chunks = 1;                   // v: model chunks per device (interleaved; zb-v: 2)
  bool rematerialize = false;       // GPipe: recompute the stage's forward right before its B
  // Minibatches (2BW: batches) the schedule covers; 0 = unbounded (asynchronous kinds only).
  std::int64_t minibatches = 1;
  // UMPIPE: per stage, the sizes of the forward and of the backward slices, each a composition
  // of the minibatch size; an empty list (or an empty entry) means m equal slices.
  std::vector<std::vector<std::int64_t>> forward_slices, backward_slices;
  // Stages that hold copies of one tied parameter (ascending, at least two each): their SYNC of
  // every round also sums those copies' gradients among them, so each such stage has a SYNC
  // before every STEP even when it is not replicated.
  std::vector<std::vector<int>> tied_stages;
  // Every stage of every replica meets every other at each round's SYNC (global gradient-norm
  // clipping: the norm spans the whole model). Flush schedules only; every stage then SYNCs
  // before each STEP.
  bool global_sync = false;

  // Throws ScheduleError naming the offending field.
  void validate() const;

  int replicas_of(int stage) const;
  bool tied(int stage) const;
  // Whether the stage runs SYNC before each STEP: replicated, tied to another stage, or global.
  bool syncs(int stage) const { return replicas_of(stage) > 1 || tied(stage) || global_sync; }
  int total_replicas() const;  // also the number of devices
  int device_of(int stage, int replica) const;
  int stage_of(int device) const;
  int replica_of(int device) const;
  std::int64_t samples() const;  // effective minibatch size
  // The pipeline position of chunk `chunk` of `stage`, in [0, stages * chunks): chunk * p +
  // stage (interleaved: a device's chunks are p apart), except zb-v's V order, where stage s
  // holds virtual stages s and 2p - 1 - s, so that the first and the last are on device 0.
  int virtual_stage(int stage, int chunk) const;
  int virtual_stages() const { return stages * chunks; }
  // The inverse of virtual_stage.
  int stage_of_virtual(int vstage) const;
  int chunk_of_virtual(int vstage) const;
  // Slice i of m equal slices: [floor(i*B/m), floor((i+1)*B/m)).
  Slice equal_slice(int i) const;
  // UMPIPE's slice sizes for a stage (equal slices where no composition is given).
  std::vector<std::int64_t> forward_composition(int stage) const;
  std::vector<std::int64_t> backward_composition(int stage) const;
};

}  // namespace tandem::schedules
