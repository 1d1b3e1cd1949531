#pragma once
// A lowering pass over one device's action stream: marks the backwards whose update may be
// written straight into the weights (Action::update_in_place), so that the decision is the
// schedule's, made once, and the stage actor only obeys it. A B qualifies when it computes its
// weight gradient, nothing else on the device contributed to the round's gradient since the
// last STEP (no earlier B or W), and the next action is that round's STEP (a SYNC between, as
// replicated stages have, rules it out: the gradient must be reduced first).
#include <functional>
#include <optional>

#include "schedules/action.hpp"

namespace tandem::schedules {

class InPlaceUpdates {
 public:
  using Source = std::function<std::optional<Action>()>;

  explicit InPlaceUpdates(Source source) : source_(std::move(source)) {}

  // The next action, marked where it qualifies; nullopt at the stream's end.
  std::optional<Action> next();

 private:
  std::optional<Action> pull();

  Source source_;
  std::optional<Action> ahead_;  // pulled to look past a B, not yet returned
  bool contributed_ = false;     // a B or W since the last STEP
};

}  // namespace tandem::schedules
