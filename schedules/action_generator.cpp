#include "schedules/action_generator.hpp"

#include <algorithm>
#include <utility>

#include "schedules/detail/generator_state.hpp"

namespace tandem::schedules {

ActionGenerator::ActionGenerator(std::unique_ptr<State> state) : state_(std::move(state)) {
  // The first round tells whether the stream ends.
  State& s = *state_;
  s.pattern = s.factory(s.round++);
  s.in_round = true;
  s.finite = s.rounds != 0 && s.pattern.backwards != detail::Pattern::kUnbounded;
}

ActionGenerator::ActionGenerator(ActionGenerator&&) noexcept = default;
ActionGenerator& ActionGenerator::operator=(ActionGenerator&&) noexcept = default;
ActionGenerator::~ActionGenerator() = default;

bool ActionGenerator::finite() const {
  return state_->finite;
}

std::optional<Action> ActionGenerator::next() {
  State& s = *state_;
  while (s.read == s.buffer.size()) {
    s.buffer.clear();
    s.read = 0;
    if (!refill()) return std::nullopt;
  }
  return s.buffer[s.read++];
}

bool ActionGenerator::refill() {
  using detail::Pattern;
  State& s = *state_;
  if (!s.in_round) {
    if (s.rounds != 0 && s.round >= s.rounds) return false;
    s.pattern = s.factory(s.round++);
    s.in_round = true;
    s.forwards_done = s.backwards_done = 0;
  }
  const Pattern& pattern = s.pattern;
  const bool endless = pattern.backwards == Pattern::kUnbounded;
  const auto forwards_left = [&] { return endless || s.forwards_done < pattern.forwards; };
  const std::int64_t warmup = endless ? pattern.warmup : std::min(pattern.warmup, pattern.forwards);
  if (s.forwards_done < warmup) {
    s.buffer.push_back(pattern.forward(s.forwards_done++));
    return true;
  }
  if (endless || s.backwards_done < pattern.backwards) {
    if (forwards_left()) s.buffer.push_back(pattern.forward(s.forwards_done++));
    s.buffer.push_back(pattern.backward(s.backwards_done));
    if (pattern.after_backward) pattern.after_backward(s.backwards_done, s.buffer);
    ++s.backwards_done;
    return true;
  }
  if (forwards_left()) {
    s.buffer.push_back(pattern.forward(s.forwards_done++));
    return true;
  }
  s.buffer = pattern.epilogue;
  s.in_round = false;
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
