#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "schedules/action.hpp"

namespace tandem::schedules::detail {

// Every schedule here is, per device and per round (a minibatch for flush schedules, the whole
// stream for asynchronous ones), the same shape: `warmup` forwards, then pairs (F(k + warmup),
// B(k)) while forwards remain, then the remaining backwards, then the epilogue (SYNC, STEP).
// GPipe is warmup = all; naive model parallelism is warmup = 0; 1F1B is warmup = w_s. ZB-V,
// whose order does not pair F and B, gives its round whole as the epilogue.
struct Pattern {
  static constexpr std::int64_t kUnbounded = -1;

  std::int64_t forwards = 0;  // kUnbounded: an endless stream (then backwards too)
  std::int64_t backwards = 0;
  std::int64_t warmup = 0;
  std::function<Action(std::int64_t)> forward;   // the k-th forward of the round
  std::function<Action(std::int64_t)> backward;  // the k-th backward of the round
  // Actions right after the k-th backward (W of zero-bubble, SYNC and STEP of PipeDream).
  std::function<void(std::int64_t, std::vector<Action>&)> after_backward;
  std::vector<Action> epilogue;
};

// Builds the pattern of one round.
using PatternFactory = std::function<Pattern(std::int64_t round)>;

}  // namespace tandem::schedules::detail
