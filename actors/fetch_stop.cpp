#include "actors/fetch_stop.hpp"

#include <utility>

namespace tandem::actors {

std::stop_token FetchStop::begin(std::int64_t b) {
  const std::lock_guard lock(mu_);
  fetch_ = std::stop_source();
  fetching_ = b;
  if (not_needed_ && not_needed_(b)) fetch_.request_stop();
  return fetch_.get_token();
}

void FetchStop::end() {
  const std::lock_guard lock(mu_);
  fetching_ = -1;
}

std::stop_token FetchStop::token() const {
  const std::lock_guard lock(mu_);
  return fetch_.get_token();
}

void FetchStop::stop(std::function<bool(std::int64_t)> not_needed) {
  const std::lock_guard lock(mu_);
  not_needed_ = std::move(not_needed);
  if (fetching_ >= 0 && not_needed_(fetching_)) fetch_.request_stop();
}

}  // namespace tandem::actors
