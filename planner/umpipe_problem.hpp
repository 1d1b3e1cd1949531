#pragma once
// UMPIPE (docs/architecture.md#schedules and #planner): every stage has its own forward and
// backward partition of the minibatch into slices. Flush semantics: each device runs all its F
// slices in sample order, then all its B slices in sample order. F of a slice starts once every one
// of its samples has arrived from the upstream stage's F: a slice of b samples arrives link(b)
// after it ends there; B likewise from the downstream stage's B; the last stage's B needs only its
// own F. The same rules as schedules::Simulator on an umpipe schedule.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "schedules/cost.hpp"

namespace tandem::planner {

// Durations of a stage's forward and backward slices by size (the backward also computes the
// weight gradient: UMPIPE does not split it).
struct UmpipeStageCost {
  schedules::Cost forward;
  schedules::Cost backward;
};

struct UmpipeProblem {
  int minibatch = 1;  // B samples
  std::vector<UmpipeStageCost> stages;
  // Delay of a message carrying b samples between stage s and s + 1 (either way): none when
  // empty, links[0] for every boundary when it has one entry, else one per boundary (P - 1).
  std::vector<schedules::Cost> links;

  int stage_count() const { return static_cast<int>(stages.size()); }
  // The delay of boundary s, or nullptr when messages are instantaneous.
  const schedules::Cost* link(int boundary) const;
  // Throws std::invalid_argument: no stages, minibatch < 1, measured costs shorter than B,
  // a negative or non-finite cost for some slice size up to B, a wrong number of links.
  void validate() const;
};

// Slice sizes in sample order, per stage; each a composition of the minibatch size.
struct UmpipeSlices {
  std::vector<std::vector<int>> forward;
  std::vector<std::vector<int>> backward;

  friend bool operator==(const UmpipeSlices&, const UmpipeSlices&) = default;
};

// m equal slices on every stage, both ways: slice i = [floor(i B/m), floor((i+1) B/m)).
UmpipeSlices equal_slices(int stages, int minibatch, int slices);

// Chromosomes as packed bit rows: row r (forward rows 0..P-1, then backward rows P..2P-1) is
// umpipe_row_words(B) words; bit i of a row (word i / 64, bit i % 64) = 1 cuts after sample i.
// Bit B-1, the end of the minibatch, is always a cut: cuts_of sets it, evaluators assume it,
// and bits from B on are zero.
constexpr std::size_t umpipe_row_words(int minibatch) {
  return (static_cast<std::size_t>(minibatch) + 63) / 64;
}
constexpr std::size_t umpipe_gene_words(int stages, int minibatch) {
  return 2 * static_cast<std::size_t>(stages) * umpipe_row_words(minibatch);
}
std::vector<std::uint64_t> cuts_of(const UmpipeSlices& slices, int minibatch);
UmpipeSlices slices_of(std::span<const std::uint64_t> cuts, int stages, int minibatch);

}  // namespace tandem::planner
