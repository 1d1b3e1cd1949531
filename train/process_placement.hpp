#pragma once
// Which process (rank of a multi-process job) runs each endpoint of a pipeline: stage replica d
// is endpoint d, the loader R and the coordinator R + 1 for R replicas (actors::PipelineSpec).
// The loader and the coordinator run on rank 0, where progress, checkpoints and the summary
// are made. Stage replicas go where the config's `rank`/`ranks` put them, else the default
// rule: the replicas, in the plan's order, cut into world_size contiguous runs of nearly equal
// length (with 4 stages on 2 ranks: stages 0-1 on rank 0, 2-3 on rank 1), so neighbours share
// a process and only the cuts cross it.
#include <string>
#include <vector>

#include "schedules/plan.hpp"
#include "train/job_spec.hpp"
#include "transport/channel.hpp"

namespace tandem::train {

class ProcessPlacement {
 public:
  // Throws JobError (at the stage's key) when a rank given is not below world_size, when
  // ranks are given but some rank runs nothing, or when the default rule has fewer replicas
  // than processes.
  ProcessPlacement(const JobSpec& job, const schedules::Plan& plan, int world_size);

  int world_size() const { return world_size_; }
  int rank_of(transport::Endpoint e) const { return ranks_.at(static_cast<size_t>(e)); }
  int endpoints() const { return static_cast<int>(ranks_.size()); }
  // Whether some stage's replicas run in more than one process (their gradients then need
  // collectives across processes).
  bool replicas_span_processes() const { return span_; }
  // "stages 0-1 (2 replicas)" for the stage replicas `rank` runs, for logs.
  std::string describe(int rank) const;

 private:
  int world_size_ = 1;
  std::vector<int> ranks_;
  std::vector<std::pair<int, int>> replica_;  // (stage, replica) of each stage endpoint
  bool span_ = false;
};

}  // namespace tandem::train
