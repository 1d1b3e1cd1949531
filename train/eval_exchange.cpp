#include "train/eval_exchange.hpp"

#include <stdexcept>
#include <utility>

#include "train/process_group.hpp"
#include "train/stage_state.hpp"

namespace tandem::train {
namespace {

// Adds rank `rank`'s decoded part of `step` to `whole`, refusing stages out of range or sent
// twice (the bytes came over the network).
void add_part(std::map<int, models::ParamSet>& whole, StageStateBundle part, int stages, int rank,
              int64_t step) {
  for (StageState& st : part.stages) {
    const std::string where = "rank " + std::to_string(rank) +
                              "'s weights for the evaluation at step " + std::to_string(step);
    if (st.stage >= stages) {
      throw std::runtime_error(where + " hold stage " + std::to_string(st.stage) + " of a " +
                               std::to_string(stages) + "-stage model");
    }
    if (!whole.emplace(st.stage, std::move(st.latest)).second) {
      throw std::runtime_error(where + " hold stage " + std::to_string(st.stage) +
                               ", which another rank sent too");
    }
  }
}

}  // namespace

EvalExchange::EvalExchange(ProcessGroup& group, std::set<int> contributors, int stages, int segment,
                           std::vector<int64_t> steps, Evaluate evaluate)
    : group_(group),
      contributors_(std::move(contributors)),
      stages_(stages),
      segment_(segment),
      steps_(std::move(steps)),
      evaluate_(std::move(evaluate)) {
  if (group_.rank() == 0) thread_ = std::thread([this] { gather(); });
}

EvalExchange::~EvalExchange() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    finished_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string EvalExchange::key(int64_t step, int rank) const {
  return "eval/" + std::to_string(segment_) + "/" + std::to_string(step) + "/" +
         std::to_string(rank);
}

void EvalExchange::add(int64_t step, const std::map<int, models::ParamSet>& stages) {
  if (group_.rank() == 0) {
    {
      std::lock_guard lock(mu_);
      local_.emplace(step, stages);
    }
    cv_.notify_all();
    return;
  }
  if (stages.empty()) return;
  StageStateBundle part;
  for (const auto& [stage, weights] : stages) part.stages.push_back({stage, weights, {}, {}});
  {
    std::lock_guard lock(mu_);
    if (!sent_.insert(step).second) return;
  }
  group_.put(key(step, group_.rank()), encode_stage_states(part));
}

void EvalExchange::finish() {
  if (group_.rank() > 0) {
    if (contributors_.count(group_.rank()) == 0) return;
    std::lock_guard lock(mu_);
    for (int64_t step : steps_) {
      if (sent_.insert(step).second) group_.put(key(step, group_.rank()), {});
    }
    return;
  }
  {
    std::lock_guard lock(mu_);
    finished_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(error_);
}

void EvalExchange::gather() {
  try {
    for (int64_t step : steps_) gather_step(step);
  } catch (...) {
    error_ = std::current_exception();
  }
}

void EvalExchange::gather_step(int64_t step) {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return finished_ || local_.count(step) > 0; });
  }
  std::map<int, models::ParamSet> whole;
  bool reached = true;
  for (int rank : contributors_) {
    if (rank == 0) continue;
    const std::vector<std::byte> bytes = group_.take(key(step, rank));
    if (bytes.empty()) {
      reached = false;  // a stop ended the segment before that rank's stages got there
      continue;
    }
    add_part(whole, decode_stage_states(bytes), stages_, rank, step);
  }
  {
    std::lock_guard lock(mu_);
    const auto it = local_.find(step);
    if (it == local_.end()) {
      reached = false;
    } else {
      for (auto& [stage, weights] : it->second) whole.emplace(stage, std::move(weights));
      local_.erase(it);
    }
  }
  if (!reached) return;
  if (static_cast<int>(whole.size()) != stages_) {
    throw std::runtime_error("the weights for the evaluation at step " + std::to_string(step) +
                             " hold " + std::to_string(whole.size()) + " of the model's " +
                             std::to_string(stages_) + " stages");
  }
  evaluate_(step, whole);
}

}  // namespace tandem::train
