#include "planner/umpipe_batch_evaluator.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "planner/detail/cut_rows.hpp"
#include "planner/detail/umpipe_lanes.hpp"

namespace tandem::planner {
namespace {

using detail::last_word;
constexpr int kLanes = detail::kUmpipeLanes;

}  // namespace

struct UmpipeBatchEvaluator::State {
  bool monotone = true;                     // every link delay is the same for all slice sizes
  std::vector<detail::UmpipeLane> lanes;    // forward of stage s at 2 s, backward at 2 s + 1
  std::vector<std::vector<double>> tables;  // t(0..B) the lanes point into
  std::vector<std::uint64_t> lane_bits;     // [row][word][lane]: the block's genes
  std::vector<double> upstream, current, send, device, forward_device, scratch;
  std::vector<double> no_delay;
};

UmpipeBatchEvaluator::UmpipeBatchEvaluator(UmpipeBatchEvaluator&&) noexcept = default;
UmpipeBatchEvaluator& UmpipeBatchEvaluator::operator=(UmpipeBatchEvaluator&&) noexcept = default;
UmpipeBatchEvaluator::~UmpipeBatchEvaluator() = default;

UmpipeBatchEvaluator::UmpipeBatchEvaluator(const UmpipeProblem& problem, UmpipeKernels kernels)
    : problem_(&problem),
      wide_(kernels == UmpipeKernels::best && detail::umpipe_avx512_available()),
      state_(std::make_unique<State>()) {
  problem.validate();
  State& st = *state_;
  const int stages = problem.stage_count();
  const std::size_t block = static_cast<std::size_t>(problem.minibatch) * kLanes;
  st.lane_bits.resize(umpipe_gene_words(stages, problem.minibatch) * kLanes);
  st.upstream.resize(block);
  st.current.resize(block);
  st.send.resize(block);
  st.device.resize(kLanes);
  st.scratch.resize(2 * kLanes);
  st.forward_device.resize(static_cast<std::size_t>(stages) * kLanes);
  st.no_delay.assign(static_cast<std::size_t>(problem.minibatch) + 1, 0.0);
  // Tables first, all of them: the lanes keep pointers into them.
  std::vector<const double*> delay_of(problem.links.size());
  for (std::size_t l = 0; l < problem.links.size(); ++l) {
    st.tables.push_back(problem.links[l].table(problem.minibatch));
  }
  for (const UmpipeStageCost& stage : problem.stages) {
    st.tables.push_back(stage.forward.table(problem.minibatch));
    st.tables.push_back(stage.backward.table(problem.minibatch));
  }
  for (std::size_t l = 0; l < problem.links.size(); ++l) {
    delay_of[l] = st.tables[l].data();
    const auto table = std::span<const double>(st.tables[l]).subspan(1);
    if (std::adjacent_find(table.begin(), table.end(), std::not_equal_to<>()) != table.end()) {
      st.monotone = false;
    }
  }
  const auto link_table = [&](int boundary) {
    return delay_of[delay_of.size() == 1 ? 0 : static_cast<std::size_t>(boundary)];
  };
  // Per stage and direction (forward at 2 s, backward at 2 s + 1): its cost and the link
  // its slices travel on.
  for (int s = 0; s < stages; ++s) {
    for (int backward = 0; backward < 2; ++backward) {
      const schedules::Cost& time =
          backward ? problem.stages[s].backward : problem.stages[s].forward;
      const int boundary = backward ? s - 1 : s;
      const bool sends = backward ? s > 0 : s + 1 < stages;
      const schedules::Cost* link = sends ? problem.link(boundary) : nullptr;
      detail::UmpipeLane lane;
      lane.time =
          st.tables[problem.links.size() + 2 * static_cast<std::size_t>(s) + (backward ? 1 : 0)]
              .data();
      lane.delay = link != nullptr ? link_table(boundary) : st.no_delay.data();
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
      st.lanes.push_back(lane);
    }
  }
}

void UmpipeBatchEvaluator::evaluate(std::span<const std::uint64_t> genes,
                                    std::span<double> makespans) {
  const UmpipeProblem& problem = *problem_;
  State& st = *state_;
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
        std::uint64_t* lane_row = st.lane_bits.data() + r * words * kLanes + k;
        for (std::size_t w = 0; w + 1 < words; ++w) lane_row[w * kLanes] = row[w];
        lane_row[(words - 1) * kLanes] = last_word(row[words - 1], samples);
      }
    }
    // One direction of one stage: scan, and spread the arrival times over the samples for the
    // next stage.
    const auto run = [&](int s, bool backward, bool waits, bool spread_on) {
      const std::size_t r = (backward ? stages : 0) + static_cast<std::size_t>(s);
      const std::uint64_t* bits = st.lane_bits.data() + r * words * kLanes;
      const detail::UmpipeLane& lane =
          st.lanes[2 * static_cast<std::size_t>(s) + (backward ? 1 : 0)];
      scan(lane, st.monotone, samples, bits, waits ? st.upstream.data() : nullptr, st.device.data(),
           st.send.data(), st.scratch.data());
      if (spread_on) {
        spread(samples, bits, st.send.data(), st.monotone ? lane.delay[1] : 0.0, st.current.data());
        std::swap(st.upstream, st.current);
      }
    };
    // The input is there at time 0; the last stage's B needs only its own F.
    for (int s = 0; s < stages; ++s) {
      std::fill(st.device.begin(), st.device.end(), 0.0);
      run(s, false, s > 0, s + 1 < stages);
      std::copy(st.device.begin(), st.device.end(), st.forward_device.begin() + s * kLanes);
    }
    for (int s = stages - 1; s >= 0; --s) {
      std::copy(st.forward_device.begin() + s * kLanes,
                st.forward_device.begin() + (s + 1) * kLanes, st.device.begin());
      run(s, true, s + 1 < stages, s > 0);
    }
    // Stage 0's last backward finishes last: every other device's last op precedes it.
    for (std::size_t k = 0; k < lanes; ++k) makespans[first + k] = st.device[k];
  }
}

}  // namespace tandem::planner
