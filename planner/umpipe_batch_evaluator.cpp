#include "planner/umpipe_batch_evaluator.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include "planner/detail/cut_rows.hpp"

namespace tandem::planner {
namespace {

using detail::last_word;
constexpr int kLanes = 32;

// Multi-versioned kernels: the widest vectors the CPU has, chosen once at load time (needs
// GNU ifuncs; elsewhere the compiler's baseline).
#if defined(__x86_64__) && defined(__linux__)
#define TANDEM_VECTOR_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#else
#define TANDEM_VECTOR_CLONES
#endif

using Lane = detail::UmpipeLane;

// One stage, one direction, kLanes individuals. bits[(i / 64) * kLanes + k] holds lane k's cut
// after sample i at bit i % 64; arrival[i * kLanes + k] is when sample i is available here.
// Writes, at each cut, when the slice reaches the next stage (finish + delay). Every step is a
// max, an add or a select on whole lane vectors: no branch depends on the cuts. Affine costs
// are computed as fixed + per_sample * b, exactly as SliceCost's tables hold them.
template <bool Affine>
[[gnu::always_inline]] inline void scan_lanes(const Lane& costs, int samples,
                                              const std::uint64_t* __restrict bits,
                                              const double* __restrict arrival,
                                              double* __restrict device, double* __restrict length,
                                              double* __restrict ready, double* __restrict send) {
  const double* __restrict time_table = costs.time;
  const double* __restrict delay_table = costs.delay;
  for (int k = 0; k < kLanes; ++k) {
    length[k] = 0;
    ready[k] = 0;
  }
  for (int i = 0; i < samples; ++i) {
    const std::size_t row = static_cast<std::size_t>(i) * kLanes;
    const std::uint64_t* __restrict word = bits + static_cast<std::size_t>(i / 64) * kLanes;
    const int shift = i % 64;
    for (int k = 0; k < kLanes; ++k) {
      const double len = length[k] + 1;
      // Every sample of the slice so far must have arrived.
      const double needed = std::max(ready[k], arrival[row + k]);
      const double start = std::max(device[k], needed);
      double time, delay;
      if constexpr (Affine) {
        time = costs.fixed + costs.per_sample * len;
        delay = costs.delay_fixed + costs.delay_per_sample * len;
      } else {
        time = time_table[static_cast<int>(len)];
        delay = delay_table[static_cast<int>(len)];
      }
      const double done = start + time;
      send[row + k] = done + delay;
      const bool here = ((word[k] >> shift) & 1) != 0;
      device[k] = here ? done : device[k];
      length[k] = here ? 0 : len;
      ready[k] = here ? 0 : needed;
    }
  }
}

TANDEM_VECTOR_CLONES void scan_affine(const Lane& costs, int samples,
                                      const std::uint64_t* __restrict bits,
                                      const double* __restrict arrival, double* __restrict device,
                                      double* __restrict length, double* __restrict ready,
                                      double* __restrict send) {
  scan_lanes<true>(costs, samples, bits, arrival, device, length, ready, send);
}

TANDEM_VECTOR_CLONES void scan_table(const Lane& costs, int samples,
                                     const std::uint64_t* __restrict bits,
                                     const double* __restrict arrival, double* __restrict device,
                                     double* __restrict length, double* __restrict ready,
                                     double* __restrict send) {
  scan_lanes<false>(costs, samples, bits, arrival, device, length, ready, send);
}

// A sample reaches the next stage with its slice: the value at the next cut at or after it.
TANDEM_VECTOR_CLONES void spread_lanes(int samples, const std::uint64_t* __restrict bits,
                                       const double* __restrict send, double* __restrict spread) {
  const std::size_t last = static_cast<std::size_t>(samples - 1) * kLanes;
  for (int k = 0; k < kLanes; ++k) spread[last + k] = send[last + k];
  for (int i = samples - 2; i >= 0; --i) {
    const std::size_t row = static_cast<std::size_t>(i) * kLanes;
    const std::uint64_t* __restrict word = bits + static_cast<std::size_t>(i / 64) * kLanes;
    const int shift = i % 64;
    for (int k = 0; k < kLanes; ++k) {
      const bool here = ((word[k] >> shift) & 1) != 0;
      spread[row + k] = here ? send[row + k] : spread[row + kLanes + k];
    }
  }
}

}  // namespace

UmpipeBatchEvaluator::UmpipeBatchEvaluator(const UmpipeProblem& problem) : problem_(&problem) {
  problem.validate();
  const int stages = problem.stage_count();
  const std::size_t block = static_cast<std::size_t>(problem.minibatch) * kLanes;
  lane_bits_.resize(umpipe_row_words(problem.minibatch) * kLanes);
  upstream_.resize(block);
  current_.resize(block);
  send_.resize(block);
  device_.resize(kLanes);
  length_.resize(kLanes);
  ready_.resize(kLanes);
  forward_device_.resize(static_cast<std::size_t>(stages) * kLanes);
  no_delay_.assign(static_cast<std::size_t>(problem.minibatch) + 1, 0.0);
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
  for (std::size_t first = 0; first < count; first += kLanes) {
    const std::size_t lanes = std::min<std::size_t>(kLanes, count - first);
    // One direction of one stage: gather the row of every lane (spare lanes repeat the last
    // individual so every loop runs the full width), scan, and spread the arrival times over
    // the samples for the next stage.
    const auto run = [&](int s, bool backward, bool spread) {
      const std::size_t r = (backward ? stages : 0) + static_cast<std::size_t>(s);
      for (std::size_t k = 0; k < kLanes; ++k) {
        const std::uint64_t* row =
            genes.data() + (first + std::min(k, lanes - 1)) * stride + r * words;
        for (std::size_t w = 0; w + 1 < words; ++w) lane_bits_[w * kLanes + k] = row[w];
        lane_bits_[(words - 1) * kLanes + k] = last_word(row[words - 1], samples);
      }
      const detail::UmpipeLane& lane = lanes_[2 * static_cast<std::size_t>(s) + (backward ? 1 : 0)];
      (lane.affine ? scan_affine : scan_table)(lane, samples, lane_bits_.data(), upstream_.data(),
                                               device_.data(), length_.data(), ready_.data(),
                                               send_.data());
      if (spread) {
        spread_lanes(samples, lane_bits_.data(), send_.data(), current_.data());
        std::swap(upstream_, current_);
      }
    };
    std::fill(upstream_.begin(), upstream_.end(), 0.0);  // the input is there at time 0
    for (int s = 0; s < stages; ++s) {
      std::fill(device_.begin(), device_.end(), 0.0);
      run(s, false, s + 1 < stages);
      std::copy(device_.begin(), device_.end(), forward_device_.begin() + s * kLanes);
    }
    std::fill(upstream_.begin(), upstream_.end(), 0.0);  // the last stage needs only its own F
    for (int s = stages - 1; s >= 0; --s) {
      std::copy(forward_device_.begin() + s * kLanes, forward_device_.begin() + (s + 1) * kLanes,
                device_.begin());
      run(s, true, s > 0);
    }
    // Stage 0's last backward finishes last: every other device's last op precedes it.
    for (std::size_t k = 0; k < lanes; ++k) makespans[first + k] = device_[k];
  }
}

}  // namespace tandem::planner
