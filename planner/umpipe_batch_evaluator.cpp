#include "planner/umpipe_batch_evaluator.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <stdexcept>
#include <utility>

#include "planner/detail/cut_rows.hpp"

namespace tandem::planner {
namespace {

using detail::last_word;
constexpr int kLanes = detail::kUmpipeLanes;

}  // namespace

UmpipeBatchEvaluator::UmpipeBatchEvaluator(const UmpipeProblem& problem, UmpipeKernels kernels)
    : problem_(&problem),
      wide_(kernels == UmpipeKernels::best && detail::umpipe_avx512_available()) {
  problem.validate();
  const int stages = problem.stage_count();
  const std::size_t block = static_cast<std::size_t>(problem.minibatch) * kLanes;
  lane_bits_.resize(umpipe_gene_words(stages, problem.minibatch) * kLanes);
  upstream_.resize(block);
  current_.resize(block);
  send_.resize(block);
  device_.resize(kLanes);
  scratch_.resize(2 * kLanes);
  forward_device_.resize(static_cast<std::size_t>(stages) * kLanes);
  no_delay_.assign(static_cast<std::size_t>(problem.minibatch) + 1, 0.0);
  for (const SliceCost& link : problem.links) {
    const auto table = link.table().subspan(1);
    if (std::adjacent_find(table.begin(), table.end(), std::not_equal_to<>()) != table.end()) {
      monotone_ = false;
    }
  }
  // Per stage and direction (forward at 2 s, backward at 2 s + 1): its cost and the link
  // its slices travel on.
  for (int s = 0; s < stages; ++s) {
    for (int backward = 0; backward < 2; ++backward) {
      const SliceCost& time = backward ? problem.stages[s].backward : problem.stages[s].forward;
      const SliceCost* link = backward ? (s > 0 ? problem.link(s - 1) : nullptr)
                                       : (s + 1 < stages ? problem.link(s) : nullptr);
      detail::UmpipeLane lane;
      lane.time = time.table().data();
      lane.delay = link != nullptr ? link->table().data() : no_delay_.data();
      const auto line = time.affine_form();
      const auto delay_line =
          link != nullptr ? link->affine_form() : std::optional{std::pair{0.0, 0.0}};
      lane.affine = line.has_value() && delay_line.has_value();
      if (lane.affine) {
        lane.fixed = line->first;
        lane.per_sample = line->second;
        lane.delay_fixed = delay_line->first;
        lane.delay_per_sample = delay_line->second;
      }
      lanes_.push_back(lane);
    }
  }
}

void UmpipeBatchEvaluator::evaluate(std::span<const std::uint64_t> genes,
                                    std::span<double> makespans) {
  const UmpipeProblem& problem = *problem_;
  const int stages = problem.stage_count();
  const int samples = problem.minibatch;
  const std::size_t words = umpipe_row_words(samples);
  const std::size_t stride = umpipe_gene_words(stages, samples);
  const std::size_t count = makespans.size();
  if (genes.size() != count * stride) {
    throw std::invalid_argument("UmpipeBatchEvaluator: wrong number of cut words");
  }
  const auto scan = wide_ ? detail::umpipe_scan_avx512 : detail::umpipe_scan;
  const auto spread = wide_ ? detail::umpipe_spread_avx512 : detail::umpipe_spread;
  for (std::size_t first = 0; first < count; first += kLanes) {
    const std::size_t lanes = std::min<std::size_t>(kLanes, count - first);
    // Every row of every lane, word w of row r at [(r * words + w) * kLanes + lane]; spare
    // lanes repeat the last individual so every loop runs the full width.
    for (std::size_t k = 0; k < kLanes; ++k) {
      const std::uint64_t* gene = genes.data() + (first + std::min(k, lanes - 1)) * stride;
      for (std::size_t r = 0; r < 2 * static_cast<std::size_t>(stages); ++r) {
        const std::uint64_t* row = gene + r * words;
        std::uint64_t* lane_row = lane_bits_.data() + r * words * kLanes + k;
        for (std::size_t w = 0; w + 1 < words; ++w) lane_row[w * kLanes] = row[w];
        lane_row[(words - 1) * kLanes] = last_word(row[words - 1], samples);
      }
    }
    // One direction of one stage: scan, and spread the arrival times over the samples for the
    // next stage.
    const auto run = [&](int s, bool backward, bool waits, bool spread_on) {
      const std::size_t r = (backward ? stages : 0) + static_cast<std::size_t>(s);
      const std::uint64_t* bits = lane_bits_.data() + r * words * kLanes;
      const detail::UmpipeLane& lane = lanes_[2 * static_cast<std::size_t>(s) + (backward ? 1 : 0)];
      scan(lane, monotone_, samples, bits, waits ? upstream_.data() : nullptr, device_.data(),
           send_.data(), scratch_.data());
      if (spread_on) {
        spread(samples, bits, send_.data(), monotone_ ? lane.delay[1] : 0.0, current_.data());
        std::swap(upstream_, current_);
      }
    };
    // The input is there at time 0; the last stage's B needs only its own F.
    for (int s = 0; s < stages; ++s) {
      std::fill(device_.begin(), device_.end(), 0.0);
      run(s, false, s > 0, s + 1 < stages);
      std::copy(device_.begin(), device_.end(), forward_device_.begin() + s * kLanes);
    }
    for (int s = stages - 1; s >= 0; --s) {
      std::copy(forward_device_.begin() + s * kLanes, forward_device_.begin() + (s + 1) * kLanes,
                device_.begin());
      run(s, true, s + 1 < stages, s > 0);
    }
    // Stage 0's last backward finishes last: every other device's last op precedes it.
    for (std::size_t k = 0; k < lanes; ++k) makespans[first + k] = device_[k];
  }
}

}  // namespace tandem::planner
