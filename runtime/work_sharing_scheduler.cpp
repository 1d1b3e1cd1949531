#include "runtime/detail/work_sharing_scheduler.hpp"

#include <chrono>

#include "runtime/actor.hpp"
#include "runtime/actor_system.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TANDEM_CPU_RELAX() _mm_pause()
#else
#define TANDEM_CPU_RELAX() std::this_thread::yield()
#endif

namespace tandem {

std::unique_ptr<Scheduler> make_work_sharing(WorkSharingOptions options) {
  if (options.workers == 0) {
    options.workers = std::max(1u, std::thread::hardware_concurrency());
  }
  if (options.budget == 0) options.budget = 1;
  return std::make_unique<detail::WorkSharingScheduler>(options);
}

namespace detail {
namespace {
thread_local WorkSharingScheduler* tl_scheduler = nullptr;
thread_local void* tl_worker = nullptr;
}  // namespace

WorkSharingScheduler::WorkSharingScheduler(WorkSharingOptions options) : options_(options) {}

WorkSharingScheduler::~WorkSharingScheduler() {
  stop();
}

void WorkSharingScheduler::start(ActorSystem& system) {
  system_ = &system;
  workers_ = std::vector<Worker>(options_.workers);
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    workers_[i].thread = std::thread([this, i] { run(i); });
  }
}

void WorkSharingScheduler::schedule(Actor* actor) {
  if (tl_scheduler == this) {
    // Woken by an actor on one of our workers: run it next on this worker, and let the
    // actor it displaces go to the shared queue where an idle worker can take it.
    auto* self = static_cast<Worker*>(tl_worker);
    Actor* displaced = self->next;
    self->next = actor;
    if (displaced != nullptr) push_shared(displaced);
    return;
  }
  push_shared(actor);
}

void WorkSharingScheduler::push_shared(Actor* actor) {
  ready_.enqueue(actor);
  // A read-modify-write, not a load: it is ordered with the parking worker's increment, so
  // either that worker's re-check sees the actor, or we see it parking and wake it.
  if (sleepers_.fetch_add(0, std::memory_order_acq_rel) > 0) {
    std::lock_guard lock(park_mu_);
    park_cv_.notify_one();
  }
}

Actor* WorkSharingScheduler::try_take(Worker& self) {
  if (self.next != nullptr) {
    Actor* a = self.next;
    self.next = nullptr;
    return a;
  }
  Actor* a = nullptr;
  return ready_.try_dequeue(a) ? a : nullptr;
}

void WorkSharingScheduler::run(std::size_t index) {
  Worker& self = workers_[index];
  tl_scheduler = this;
  tl_worker = &self;
  const std::size_t budget = system_->budget();
  while (!stopping_.load(std::memory_order_acquire)) {
    Actor* actor = try_take(self);
    if (actor == nullptr) {
      for (std::size_t spin = 0; spin < options_.spin_iterations && actor == nullptr; ++spin) {
        TANDEM_CPU_RELAX();
        if ((spin & 63) == 63 && stopping_.load(std::memory_order_relaxed)) break;
        if (ready_.size_approx() != 0) actor = try_take(self);
      }
    }
    if (actor == nullptr) {
      std::unique_lock lock(park_mu_);
      sleepers_.fetch_add(1, std::memory_order_acq_rel);
      while (!stopping_.load(std::memory_order_acquire) && !ready_.try_dequeue(actor)) {
        // The timeout is a safety net only; pushes notify under the lock.
        park_cv_.wait_for(lock, std::chrono::milliseconds(50));
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      if (actor == nullptr) break;
    }
    if (actor->resume(budget)) {
      // Yielded with work left: behind everyone else, for fairness.
      push_shared(actor);
    } else {
      system_->actor_went_idle();
    }
  }
  // Actors left in `next` are dropped with the queue at stop: stop() discards pending work.
  tl_scheduler = nullptr;
  tl_worker = nullptr;
}

void WorkSharingScheduler::stop() {
  if (stopping_.exchange(true)) return;
  {
    std::lock_guard lock(park_mu_);
    park_cv_.notify_all();
  }
  for (auto& w : workers_) {
    if (w.thread.joinable()) w.thread.join();
  }
}

void WorkSharingScheduler::wait_idle() {
  for (;;) {
    const std::int64_t v = system_->active();
    if (v == 0 || system_->stopped()) return;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace detail
}  // namespace tandem
