#pragma once
// What the loader feeds: a minibatch's inputs and targets, as one tensor each or as pieces of
// consecutive samples with shapes of their own (GPT slices of different sequence lengths).
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/tensor.hpp"
#include "schedules/action.hpp"

namespace tandem::actors {

struct MinibatchData {
  struct Piece {
    schedules::Slice samples;  // rows of the minibatch this piece holds
    Tensor inputs, targets;    // dimension 0 = samples.size()
  };
  std::vector<Piece> pieces;  // consecutive, from sample 0

  static MinibatchData whole(Tensor inputs, Tensor targets);
  std::int64_t samples() const { return pieces.empty() ? 0 : pieces.back().samples.end; }
  // Loss rows of the whole minibatch (targets' elements): every slice's loss is scaled by it.
  std::int64_t loss_rows() const;
  // Samples [begin, end) of inputs (targets when `targets`), concatenated across pieces; throws
  // std::invalid_argument naming the pieces when they cannot be joined (different shapes).
  Tensor rows(schedules::Slice samples, bool targets) const;
};

using DataSource = std::function<MinibatchData(std::int64_t minibatch)>;

}  // namespace tandem::actors
