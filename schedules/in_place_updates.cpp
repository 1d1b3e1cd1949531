#include "schedules/in_place_updates.hpp"

namespace tandem::schedules {

std::optional<Action> InPlaceUpdates::pull() {
  if (ahead_) {
    std::optional<Action> a = std::move(ahead_);
    ahead_.reset();
    return a;
  }
  return source_();
}

std::optional<Action> InPlaceUpdates::next() {
  std::optional<Action> a = pull();
  if (!a) return a;
  if (a->op == Op::STEP) {
    contributed_ = false;
  } else if (a->op == Op::B || a->op == Op::W) {
    if (a->op == Op::B && a->with_weight && !contributed_) {
      ahead_ = source_();
      a->update_in_place = ahead_ && ahead_->op == Op::STEP && ahead_->minibatch == a->minibatch;
    }
    contributed_ = true;
  }
  return a;
}

}  // namespace tandem::schedules
