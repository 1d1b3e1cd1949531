#include "actors/stage_ties.hpp"

#include <algorithm>
#include <map>

namespace tandem::actors {

std::vector<std::vector<int>> tie_stages(const models::Model& model,
                                         const std::vector<schedules::LayerRange>& vlayers,
                                         const schedules::ScheduleParams& p) {
  std::vector<std::vector<int>> out;
  for (const models::TieGroup& g : model.ties()) {
    std::vector<int> stages;
    for (const models::TieCopy& c : g.copies) {
      for (std::size_t v = 0; v < vlayers.size(); ++v) {
        if (c.layer >= vlayers[v].begin && c.layer < vlayers[v].end) {
          stages.push_back(p.stage_of_virtual(static_cast<int>(v)));
        }
      }
    }
    std::sort(stages.begin(), stages.end());
    stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
    out.push_back(std::move(stages));
  }
  return out;
}

std::vector<std::vector<int>> spread_ties(const std::vector<std::vector<int>>& stages_of_tie) {
  std::vector<std::vector<int>> out;
  for (const std::vector<int>& s : stages_of_tie) {
    if (s.size() >= 2 && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

StageTies::StageTies(const models::Model& model, const std::vector<std::vector<int>>& stages_of_tie,
                     const schedules::ScheduleParams& p, int stage) {
  std::map<std::vector<transport::Endpoint>, std::vector<std::size_t>> by_members;
  for (std::size_t t = 0; t < stages_of_tie.size(); ++t) {
    const std::vector<int>& stages = stages_of_tie[t];
    if (std::find(stages.begin(), stages.end(), stage) == stages.end()) continue;
    if (stages.size() == 1) {
      local_.push_back(model.ties()[t]);
      continue;
    }
    spread_.push_back(model.ties()[t]);
    std::vector<transport::Endpoint> members;
    for (const int s : stages) {
      for (int r = 0; r < p.replicas_of(s); ++r) members.push_back(p.device_of(s, r));
    }
    by_members[members].push_back(t);
  }
  for (auto& [members, ties] : by_members) reductions_.push_back({members, ties});
}

}  // namespace tandem::actors
