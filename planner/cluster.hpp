#pragma once
// The machines a plan runs on: a hierarchical topology (docs/architecture.md#planner) read from
// YAML.
//
//   levels:                       # innermost first
//     - {name: gpu, units: 8, bandwidth: 300 GB/s}    # 8 workers joined at 300 GB/s
//     - {name: host, units: 16, bandwidth: 25 GB/s}   # 16 of those joined at 25 GB/s
//   memory_per_worker: 80 GiB     # optional; a number is bytes
//   sync_factor: 2                # optional; weight sync = factor (m-1) W / (m B)
//   device: cuda                  # optional: cpu (default) or cuda
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::planner {

struct TopologyLevel {
  std::string name;
  int units = 1;                // units of the level below (workers for the first level)
  double bytes_per_second = 0;  // bandwidth joining those units
};

struct Cluster {
  std::vector<TopologyLevel> levels;  // innermost first
  double memory_per_worker_bytes = std::numeric_limits<double>::infinity();
  double sync_factor = 2.0;
  bool sync_factor_given = false;  // PipeDream's cost model defaults to its own factor, 4
  std::string device = "cpu";

  int workers() const;
};

// Throws std::runtime_error as "cluster.yaml:4: levels[1].bandwidth: must be positive".
Cluster parse_cluster(std::string_view yaml_text, std::string_view source);
Cluster load_cluster(const std::filesystem::path& path);

}  // namespace tandem::planner
