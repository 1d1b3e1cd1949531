#pragma once
// What a config's `cluster:` section asks of the process group a launched rank joins.
#include "apps/config.hpp"
#include "apps/process_group.hpp"

namespace tandem::apps {

ProcessGroupOptions process_group_options(const ClusterConfig& cluster);

}  // namespace tandem::apps
