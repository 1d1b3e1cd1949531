#pragma once
// What kind of failure an exception the library threw is, and where it sits (stage, replica,
// rank, minibatch, key): the one place that knows the exception types of every layer below
// (actors, models, schedules, transport), so that a front end reports failures by kind without
// reaching below train/. The embedding API maps each kind to its public ErrorCode.
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

namespace tandem::train {

class ProcessGroup;

enum class FailureKind {
  config,      // a config key or option that cannot be
  plan,        // a plan the model or the schedule cannot run
  checkpoint,  // a checkpoint or weights file that cannot be read, or holds another model
  data,        // the data source, a data file, or a batch that does not fit
  layer,       // a layer's (or loss's) forward or backward threw while the run ran
  lost_rank,   // another process of the job was lost, or could not be joined
  stalled,     // the run went quiet
  diverged,    // the loss or the gradients' norm became NaN or infinite
  internal,    // a fault of Tandem itself
};

struct FailurePlace {
  std::optional<int> stage;
  std::optional<int> replica;
  std::optional<int> rank;
  std::optional<std::int64_t> minibatch;
  std::string key;  // the config key at fault ("train.seed"), where the failure names one
};

struct FailureClass {
  FailureKind kind = FailureKind::internal;
  FailurePlace where;
};

// `failure`'s kind. `group` (may be null): the process group of a multi-process job, whose
// first failure tells a lost rank from a stalled one wherever the exception itself cannot.
FailureClass classify_failure(const std::exception_ptr& failure, const ProcessGroup* group);

}  // namespace tandem::train
