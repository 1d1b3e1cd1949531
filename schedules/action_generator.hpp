#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "schedules/action.hpp"

namespace tandem::schedules {

class Schedule;

// The actions of one replica, produced lazily: the runtime pulls the next one when it is ready
// for more work. Finite for flush schedules; endless for asynchronous ones unless bounded.
// Made by Schedule::generator().
class ActionGenerator {
 public:
  ActionGenerator(ActionGenerator&&) noexcept;
  ActionGenerator& operator=(ActionGenerator&&) noexcept;
  ~ActionGenerator();

  // The next action, or nothing once the schedule is over.
  std::optional<Action> next();
  bool finite() const;

 private:
  friend class Schedule;
  // The round patterns and the position in them, defined beside the patterns: those are the
  // schedules' private vocabulary, not part of the interface.
  struct State;
  explicit ActionGenerator(std::unique_ptr<State> state);

  bool refill();

  std::unique_ptr<State> state_;
};

// The first `n` actions (fewer if the generator ends first).
std::vector<Action> take(ActionGenerator& generator, std::size_t n);

}  // namespace tandem::schedules
