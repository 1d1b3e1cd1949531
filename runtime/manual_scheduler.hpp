#pragma once
#include <condition_variable>
#include <deque>
#include <mutex>

#include "runtime/scheduler.hpp"

namespace tandem {

// Runs actors on the calling thread, one message per resume. schedule() may be called from
// the timer thread, so the ready queue is locked; everything else happens on the test thread.
class ManualScheduler final : public Scheduler {
 public:
  void start(ActorSystem& system) override { system_ = &system; }
  void schedule(Actor* actor) override;
  void stop() override;
  void wait_idle() override { run_until_idle(); }
  std::size_t worker_count() const override { return 0; }
  std::size_t budget() const override { return 1; }

  // Resumes one ready actor for one message. Returns false when nothing was ready.
  bool run_one();
  // Runs until no actor is ready and no timer is pending; returns the number of resumes.
  std::size_t run_until_idle();
  std::size_t ready_count() const;

 private:
  ActorSystem* system_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Actor*> ready_;
};

}  // namespace tandem
