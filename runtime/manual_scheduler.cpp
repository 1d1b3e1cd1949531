#include "runtime/manual_scheduler.hpp"

#include <chrono>

#include "runtime/actor.hpp"
#include "runtime/actor_system.hpp"

namespace tandem {

std::unique_ptr<ManualScheduler> make_manual() {
  return std::make_unique<ManualScheduler>();
}

void ManualScheduler::schedule(Actor* actor) {
  system_->actor_scheduled();
  {
    std::lock_guard lock(mu_);
    ready_.push_back(actor);
  }
  cv_.notify_one();
}

void ManualScheduler::stop() {
  std::lock_guard lock(mu_);
  ready_.clear();
}

std::size_t ManualScheduler::ready_count() const {
  std::lock_guard lock(mu_);
  return ready_.size();
}

bool ManualScheduler::run_one() {
  Actor* actor = nullptr;
  {
    std::lock_guard lock(mu_);
    if (ready_.empty()) return false;
    actor = ready_.front();
    ready_.pop_front();
  }
  if (resume(*actor, 1)) {
    std::lock_guard lock(mu_);
    ready_.push_back(actor);
  } else {
    system_->actor_went_idle();
  }
  return true;
}

std::size_t ManualScheduler::run_until_idle() {
  std::size_t resumes = 0;
  for (;;) {
    while (run_one()) ++resumes;
    if (system_ == nullptr || system_->active() == 0 || system_->stopped()) return resumes;
    // Only timers are outstanding: wait for one to make an actor ready.
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(5), [&] { return !ready_.empty(); });
  }
}

}  // namespace tandem
