#include "schedules/action_generator.hpp"

#include <algorithm>
#include <utility>

namespace tandem::schedules {

ActionGenerator::ActionGenerator(detail::PatternFactory factory, std::int64_t rounds)
    : factory_(std::move(factory)), rounds_(rounds) {
  // The first round tells whether the stream ends.
  pattern_ = factory_(round_++);
  in_round_ = true;
  finite_ = rounds_ != 0 && pattern_.backwards != detail::Pattern::kUnbounded;
}

std::optional<Action> ActionGenerator::next() {
  while (read_ == buffer_.size()) {
    buffer_.clear();
    read_ = 0;
    if (!refill()) return std::nullopt;
  }
  return buffer_[read_++];
}

bool ActionGenerator::refill() {
  using detail::Pattern;
  if (!in_round_) {
    if (rounds_ != 0 && round_ >= rounds_) return false;
    pattern_ = factory_(round_++);
    in_round_ = true;
    forwards_done_ = backwards_done_ = 0;
  }
  const bool endless = pattern_.backwards == Pattern::kUnbounded;
  const auto forwards_left = [&] { return endless || forwards_done_ < pattern_.forwards; };
  const std::int64_t warmup =
      endless ? pattern_.warmup : std::min(pattern_.warmup, pattern_.forwards);
  if (forwards_done_ < warmup) {
    buffer_.push_back(pattern_.forward(forwards_done_++));
    return true;
  }
  if (endless || backwards_done_ < pattern_.backwards) {
    if (forwards_left()) buffer_.push_back(pattern_.forward(forwards_done_++));
    buffer_.push_back(pattern_.backward(backwards_done_));
    if (pattern_.after_backward) pattern_.after_backward(backwards_done_, buffer_);
    ++backwards_done_;
    return true;
  }
  if (forwards_left()) {
    buffer_.push_back(pattern_.forward(forwards_done_++));
    return true;
  }
  buffer_ = pattern_.epilogue;
  in_round_ = false;
  return true;
}

std::vector<Action> take(ActionGenerator& generator, std::size_t n) {
  std::vector<Action> out;
  out.reserve(std::min<std::size_t>(n, 4096));
  while (out.size() < n) {
    auto action = generator.next();
    if (!action) break;
    out.push_back(*action);
  }
  return out;
}

}  // namespace tandem::schedules
