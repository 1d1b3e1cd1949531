#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "schedules/action.hpp"
#include "schedules/detail/pattern.hpp"

namespace tandem::schedules {

// The actions of one replica, produced lazily: the runtime pulls the next one when it is ready
// for more work. Finite for flush schedules; endless for asynchronous ones unless bounded.
class ActionGenerator {
 public:
  // `rounds` patterns from `factory`; rounds == 0: unbounded.
  ActionGenerator(detail::PatternFactory factory, std::int64_t rounds);

  // The next action, or nothing once the schedule is over.
  std::optional<Action> next();
  bool finite() const { return finite_; }

 private:
  bool refill();

  detail::PatternFactory factory_;
  std::int64_t rounds_;
  bool finite_ = false;
  std::int64_t round_ = 0;
  detail::Pattern pattern_;
  bool in_round_ = false;
  std::int64_t forwards_done_ = 0;
  std::int64_t backwards_done_ = 0;
  std::vector<Action> buffer_;
  std::size_t read_ = 0;
};

// The first `n` actions (fewer if the generator ends first).
std::vector<Action> take(ActionGenerator& generator, std::size_t n);

}  // namespace tandem::schedules
