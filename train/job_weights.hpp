#pragma once
// What rank 0 learns, at the end of a multi-process job, of the weights the other ranks hold:
// each tensor's fingerprint always (8 bytes a tensor, so the job prints the fingerprint a run in
// one process prints), and the tensors themselves only when rank 0 evaluates the whole model on
// held-out data. Each rank contributes the stages whose replica 0 it runs.
#include <cstdint>
#include <optional>

#include "models/model.hpp"
#include "models/param_set.hpp"

namespace tandem::train {

class ProcessGroup;

struct JobWeights {
  // Rank 0: the whole model's (models::ParamSet::fingerprint of its weights in model order);
  // other ranks: of their own stages.
  std::uint64_t fingerprint = 0;
  // Rank 0, when asked for: the whole model's weights.
  std::optional<models::ParamSet> whole;
};

// Every rank calls it once, after its last segment, with its own stages' weights. Throws
// std::runtime_error naming the rank whose part is malformed or incomplete.
JobWeights finish_job_weights(ProcessGroup& group, const models::Model& model,
                              const models::ParamSet& own, bool gather_weights);

}  // namespace tandem::train
