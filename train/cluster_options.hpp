#pragma once
// What a job's cluster part (a config's `cluster:` section) asks of the process group a launched
// rank joins.
#include "train/job_spec.hpp"
#include "train/process_group.hpp"

namespace tandem::train {

ProcessGroupOptions process_group_options(const ClusterSpec& cluster);

}  // namespace tandem::train
