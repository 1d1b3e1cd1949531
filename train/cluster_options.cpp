#include "train/cluster_options.hpp"

#include <cmath>

namespace tandem::train {

ProcessGroupOptions process_group_options(const ClusterSpec& cluster) {
  ProcessGroupOptions o;
  o.transport = cluster.transport;
  o.collectives = cluster.collectives;
  o.tcp_lanes = cluster.tcp_lanes;
  o.stall_timeout = std::chrono::milliseconds(std::llround(cluster.stall_timeout_s * 1000.0));
  return o;
}

}  // namespace tandem::train
