#pragma once
#include <concurrentqueue/concurrentqueue.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/scheduler.hpp"

namespace tandem::detail {

class WorkSharingScheduler final : public Scheduler {
 public:
  explicit WorkSharingScheduler(WorkSharingOptions options);
  ~WorkSharingScheduler() override;

  void start(ActorSystem& system) override;
  void schedule(Actor* actor) override;
  void stop() override;
  void wait_idle() override;
  std::size_t worker_count() const override { return options_.workers; }

 private:
  struct Worker {
    std::thread thread;
    Actor* next = nullptr;  // runs right after the current actor: no cross-thread hand-off
  };
  void run(std::size_t index);
  void push_shared(Actor* actor);
  Actor* try_take(Worker& self);

  WorkSharingOptions options_;
  ActorSystem* system_ = nullptr;
  std::vector<Worker> workers_;
  moodycamel::ConcurrentQueue<Actor*> ready_;
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stopping_{false};
  std::mutex park_mu_;
  std::condition_variable park_cv_;
};

}  // namespace tandem::detail
