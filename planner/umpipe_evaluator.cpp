#include "planner/umpipe_evaluator.hpp"

#include <algorithm>
#include <bit>
#include <functional>
#include <stdexcept>

#include "planner/detail/cut_rows.hpp"

namespace tandem::planner {

using detail::last_word;

UmpipeEvaluator::UmpipeEvaluator(const UmpipeProblem& problem) : problem_(&problem) {
  problem.validate();
  upstream_.resize(static_cast<std::size_t>(problem.minibatch));
  current_.resize(static_cast<std::size_t>(problem.minibatch));
  forward_end_.resize(static_cast<std::size_t>(problem.stage_count()));
  for (const UmpipeStageCost& stage : problem.stages)
    times_.push_back(stage.forward.table(problem.minibatch));
  for (const UmpipeStageCost& stage : problem.stages)
    times_.push_back(stage.backward.table(problem.minibatch));
  for (const schedules::Cost& link : problem.links) {
    delays_.push_back(link.table(problem.minibatch));
    const auto table = std::span<const double>(delays_.back()).subspan(1);
    if (std::adjacent_find(table.begin(), table.end(), std::not_equal_to<>()) != table.end()) {
      constant_delays_ = false;
    }
  }
}

double UmpipeEvaluator::makespan(std::span<const std::uint64_t> cuts) {
  const UmpipeProblem& problem = *problem_;
  const int stages = problem.stage_count();
  const int samples = problem.minibatch;
  const std::size_t words = umpipe_row_words(samples);
  if (cuts.size() != umpipe_gene_words(stages, samples)) {
    throw std::invalid_argument("UmpipeEvaluator: wrong number of cut words");
  }
  const auto row_of = [&](std::size_t r) { return cuts.data() + r * words; };
  // The first cut at or after sample i in a row: where the slice holding i ends.
  const auto next_cut = [&](const std::uint64_t* row, int i) {
    std::size_t w = static_cast<std::size_t>(i) / 64;
    std::uint64_t word = w + 1 == words ? last_word(row[w], samples) : row[w];
    word >>= i % 64;
    if (word != 0) return i + std::countr_zero(word);
    for (++w;; ++w) {
      word = w + 1 == words ? last_word(row[w], samples) : row[w];
      if (word != 0) return static_cast<int>(w * 64) + std::countr_zero(word);
    }
  };
  // One direction of one stage. `neighbour`: the row whose slices it waits for (nullptr:
  // none); they reached this stage at upstream_[their last sample]. `link`: the delay of
  // sending its own slices on (nullptr: none); their arrivals go to current_[last sample].
  const auto link = [&](int boundary) -> const double* {
    if (delays_.empty()) return nullptr;
    return delays_[delays_.size() == 1 ? 0 : static_cast<std::size_t>(boundary)].data();
  };
  const auto run = [&](std::size_t r, const double* cost, double device,
                       const std::uint64_t* neighbour, const double* delay) {
    const std::uint64_t* row = row_of(r);
    int begin = 0;
    for (std::size_t w = 0; w < words; ++w) {
      std::uint64_t word = w + 1 == words ? last_word(row[w], samples) : row[w];
      while (word != 0) {
        const int i = static_cast<int>(w * 64) + std::countr_zero(word);
        word &= word - 1;
        double start = device;
        if (neighbour != nullptr && constant_delays_) {
          // Arrivals grow with the sample index: the neighbour's slice holding sample i is
          // the last to arrive of those this slice needs.
          start = std::max(start, upstream_[next_cut(neighbour, i)]);
        } else if (neighbour != nullptr) {
          // Every neighbour slice that shares a sample with [begin, i].
          for (int j = next_cut(neighbour, begin);; j = next_cut(neighbour, j + 1)) {
            start = std::max(start, upstream_[j]);
            if (j >= i) break;
          }
        }
        const int b = i + 1 - begin;
        device = start + cost[b];
        current_[i] = delay == nullptr ? device : device + delay[b];
        begin = i + 1;
      }
    }
    std::swap(upstream_, current_);
    return device;
  };
  for (int s = 0; s < stages; ++s) {
    forward_end_[s] = run(static_cast<std::size_t>(s), times_[s].data(), 0.0,
                          s > 0 ? row_of(static_cast<std::size_t>(s) - 1) : nullptr,
                          s + 1 < stages ? link(s) : nullptr);
  }
  double makespan = 0;
  for (int s = stages - 1; s >= 0; --s) {
    const std::size_t r = static_cast<std::size_t>(stages + s);
    const double end = run(r, times_[r].data(), forward_end_[s],
                           s + 1 < stages ? row_of(r + 1) : nullptr, s > 0 ? link(s - 1) : nullptr);
    makespan = std::max(makespan, end);
  }
  return makespan;
}

double umpipe_makespan(const UmpipeProblem& problem, const UmpipeSlices& slices) {
  if (static_cast<int>(slices.forward.size()) != problem.stage_count() ||
      static_cast<int>(slices.backward.size()) != problem.stage_count()) {
    throw std::invalid_argument(
        "umpipe_makespan: need one forward and one backward partition "
        "per stage");
  }
  UmpipeEvaluator evaluator(problem);
  return evaluator.makespan(cuts_of(slices, problem.minibatch));
}

}  // namespace tandem::planner
