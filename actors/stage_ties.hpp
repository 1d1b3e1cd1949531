#pragma once
// Where a model's tied parameters (models/tied_params.hpp) live in a pipeline, and what one stage
// replica does about them. A tie whose copies all sit on one stage is summed there, right before
// the update; a tie spread over stages is summed among them at each round's SYNC: every stage
// first adds up its own copies, then one all-reduce (a sum, to which replica 0 of each stage
// contributes, after the stage's replicas agreed on their gradient) gives every copy the total.
#include <cstdint>
#include <vector>

#include "models/model.hpp"
#include "schedules/plan.hpp"
#include "schedules/schedule_params.hpp"
#include "transport/channel.hpp"

namespace tandem::actors {

// For each of the model's ties, the stages holding its copies (ascending, once each), given the
// layers of each virtual stage.
std::vector<std::vector<int>> tie_stages(const models::Model& model,
                                         const std::vector<schedules::LayerRange>& vlayers,
                                         const schedules::ScheduleParams& p);
// The ties spread over two or more stages, each once: ScheduleParams::tied_stages.
std::vector<std::vector<int>> spread_ties(const std::vector<std::vector<int>>& stages_of_tie);

// One all-reduce of a SYNC: the first local copy of each of `ties` (indices into the model's),
// among every replica of the stages that hold them.
struct TieReduction {
  std::vector<transport::Endpoint> members;
  std::vector<std::size_t> ties;
};

class StageTies {
 public:
  StageTies() = default;
  StageTies(const models::Model& model, const std::vector<std::vector<int>>& stages_of_tie,
            const schedules::ScheduleParams& p, int stage);

  bool empty() const { return local_.empty() && spread_.empty(); }
  // Ties whose copies are all on this stage, and those that are also on other stages.
  const std::vector<models::TieGroup>& local() const { return local_; }
  const std::vector<models::TieGroup>& spread() const { return spread_; }
  // The all-reduces of each SYNC, in an order every stage agrees on (by members).
  const std::vector<TieReduction>& reductions() const { return reductions_; }

 private:
  std::vector<models::TieGroup> local_, spread_;
  std::vector<TieReduction> reductions_;
};

}  // namespace tandem::actors
