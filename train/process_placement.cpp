#include "train/process_placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "train/job_error.hpp"

namespace tandem::train {

ProcessPlacement::ProcessPlacement(const JobSpec& job, const schedules::Plan& plan, int world_size)
    : world_size_(world_size) {
  const schedules::ScheduleParams& sp = plan.schedule;
  const int R = sp.total_replicas();
  ranks_.assign(static_cast<size_t>(R + 2), 0);
  for (int d = 0; d < R; ++d) replica_.emplace_back(sp.stage_of(d), sp.replica_of(d));
  const bool given =
      job.pipeline && !job.pipeline->stages.empty() && !job.pipeline->stages.front().ranks.empty();
  if (given) {
    const auto& stages = job.pipeline->stages;
    for (int d = 0; d < R; ++d) {
      const auto [s, r] = replica_[static_cast<size_t>(d)];
      const StageSpec& st = stages.at(static_cast<size_t>(s));
      const int64_t rank = st.ranks.at(static_cast<size_t>(r));
      if (rank >= world_size) {
        throw JobError(
            fmt::format("pipeline.stages[{}].ranks", s),
            fmt::format("replica {} is placed on rank {}, but the job has {} "
                        "process{} (ranks 0-{})",
                        r, rank, world_size, world_size == 1 ? "" : "es", world_size - 1));
      }
      ranks_[static_cast<size_t>(d)] = static_cast<int>(rank);
    }
    std::set<int> used(ranks_.begin(), ranks_.end());
    for (int k = 0; k < world_size; ++k) {
      if (used.count(k) == 0) {
        throw JobError("pipeline.stages",
                       fmt::format("rank {} of the {} processes runs no stage replica (place "
                                   "one there with rank: {}, or start fewer processes)",
                                   k, world_size, k));
      }
    }
  } else if (world_size > 1) {
    if (R < world_size) {
      throw JobError("pipeline",
                     fmt::format("the plan has {} stage replica{} for {} processes: each "
                                 "process needs at least one (more stages or replicas, or "
                                 "fewer processes)",
                                 R, R == 1 ? "" : "s", world_size));
    }
    for (int d = 0; d < R; ++d) {
      ranks_[static_cast<size_t>(d)] = static_cast<int>(static_cast<int64_t>(d) * world_size / R);
    }
  }
  for (int s = 0; s < sp.stages; ++s) {
    for (int r = 1; r < sp.replicas_of(s); ++r) {
      span_ = span_ || ranks_[static_cast<size_t>(sp.device_of(s, r))] !=
                           ranks_[static_cast<size_t>(sp.device_of(s, 0))];
    }
  }
}

std::string ProcessPlacement::describe(int rank) const {
  std::vector<int> stages;
  int replicas = 0;
  for (size_t d = 0; d < replica_.size(); ++d) {
    if (ranks_[d] != rank) continue;
    ++replicas;
    if (stages.empty() || stages.back() != replica_[d].first) stages.push_back(replica_[d].first);
  }
  if (stages.empty()) return "no stage";
  std::string out = stages.size() == 1 ? "stage " : "stages ";
  // Runs of consecutive stages as "a-b".
  for (size_t i = 0; i < stages.size();) {
    size_t j = i;
    while (j + 1 < stages.size() && stages[j + 1] == stages[j] + 1) ++j;
    out += fmt::format("{}{}", i > 0 ? ", " : "", stages[i]);
    if (j > i) out += fmt::format("-{}", stages[j]);
    i = j + 1;
  }
  if (replicas != static_cast<int>(stages.size())) out += fmt::format(" ({} replicas)", replicas);
  return out;
}

}  // namespace tandem::train
