#include "runtime/actor_system.hpp"

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/log.hpp"
#include "runtime/message_registry.hpp"
#include "runtime/timer_service.hpp"
#include "runtime/trace_recorder.hpp"

namespace tandem {

std::string to_string(SendStatus s) {
  switch (s) {
    case SendStatus::ok:
      return "ok";
    case SendStatus::target_stopped:
      return "target actor stopped";
    case SendStatus::system_stopped:
      return "actor system stopped";
    case SendStatus::no_target:
      return "no target actor";
  }
  return "unknown send status";
}

ActorSystem::ActorSystem(std::unique_ptr<Scheduler> scheduler, ActorSystemOptions options)
    : options_(options),
      scheduler_(std::move(scheduler)),
      timers_(scheduler_->drives_timers()
                  ? std::make_unique<TimerService>(
                        DrivenTimers{[this](std::chrono::steady_clock::time_point deadline) {
                          scheduler_->timer_set(deadline);
                        }})
                  : std::make_unique<TimerService>([this] { scheduler_->expect_work(); })) {
  error_handler_ = [](const ActorError& e) {
    tandem::log::error("actor '{}' stopped while handling '{}': {}", e.actor, e.message_type,
                       e.what);
  };
  scheduler_->start(*this);
}

ActorSystem::~ActorSystem() {
  stop();
  {
    // Events always complete (a cuda stream drains; a failed one completes with its error).
    std::unique_lock lock(completions_mu_);
    completions_cv_.wait(lock, [&] { return completions_pending_ == 0; });
  }
  actors_.clear();
}

TimerService& ActorSystem::timers() {
  return *timers_;
}

void ActorSystem::adopt(std::unique_ptr<Actor> actor) {
  actor->system_ = this;
  actor->id_ = next_id_.fetch_add(1);
  if (options_.trace != nullptr) options_.trace->set_track_name(actor->id_, actor->name());
  std::lock_guard lock(actors_mu_);
  actors_.push_back(std::move(actor));
}

SendStatus ActorSystem::target_status(const Actor* to) const {
  if (to == nullptr) return SendStatus::no_target;
  if (stopped()) return SendStatus::system_stopped;
  if (to->stopped_.load(std::memory_order_seq_cst)) return SendStatus::target_stopped;
  return SendStatus::ok;
}

SendResult ActorSystem::send(Actor* to, Message msg, ActorId from) {
  if (to == nullptr) return {SendStatus::no_target};
  if (const SendStatus s = target_status(to); s != SendStatus::ok) return {s};
  msg.env.source = from;
  msg.env.target = to->id_;
  if (options_.trace != nullptr) {
    msg.trace_flow = options_.trace->next_flow_id();
    options_.trace->flow_start(msg.trace_flow, from, message_type_name(msg.type()),
                               options_.trace->now_ns());
  }
  // A stopped actor's inbox is closed: what it refuses was never accepted.
  if (!to->inbox_.push(std::move(msg))) return {SendStatus::target_stopped};
  if (to->claim()) schedule(to);
  return {};
}

SendResult ActorSystem::send_bulk(Actor* to, Message* msgs, std::size_t n, ActorId from) {
  if (to == nullptr) return {SendStatus::no_target};
  if (const SendStatus s = target_status(to); s != SendStatus::ok) return {s};
  if (n == 0) return {};
  for (std::size_t i = 0; i < n; ++i) {
    msgs[i].env.source = from;
    msgs[i].env.target = to->id_;
  }
  if (!to->inbox_.push_bulk(msgs, n)) return {SendStatus::target_stopped};
  if (to->claim()) schedule(to);
  return {};
}

void ActorSystem::schedule(Actor* actor) {
  scheduler_->schedule(actor);  // it counts the activity (actor_scheduled)
}

void ActorSystem::activity_done() {
  if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) notify_idle();
}

void ActorSystem::add_activity(std::int64_t delta) {
  if (delta != 0 && active_.fetch_add(delta, std::memory_order_acq_rel) + delta == 0) {
    notify_idle();
  }
}

void ActorSystem::notify_idle() {
  // Under the lock, so that a waiter between its check and its wait cannot miss it. Reaching
  // zero is rare in a busy system (pending timers count), so the lock costs nothing there.
  std::lock_guard lock(idle_mu_);
  idle_cv_.notify_all();
}

void ActorSystem::wait_until_quiet() {
  std::unique_lock lock(idle_mu_);
  // The timeout is a safety net only: every transition to zero and stop() notify.
  while (active() != 0 && !stopped()) idle_cv_.wait_for(lock, std::chrono::milliseconds(100));
}

void ActorSystem::send_after(std::chrono::nanoseconds delay, Actor* to, Message msg) {
  send_at(std::chrono::steady_clock::now() + delay, to, std::move(msg));
}

void ActorSystem::send_at(std::chrono::steady_clock::time_point deadline, Actor* to, Message msg) {
  active_.fetch_add(1, std::memory_order_acq_rel);
  timers_->at(deadline, [this, to, msg = std::move(msg)](bool fired) mutable {
    if (fired) {
      const ActorId from = msg.env.source;
      if (!send(to, std::move(msg), from).ok()) count_dead_letters(1);
    }
    activity_done();
  });
}

void ActorSystem::send_when(const Event& event, Actor* to, Message msg) {
  active_.fetch_add(1, std::memory_order_acq_rel);
  {
    std::lock_guard lock(completions_mu_);
    ++completions_pending_;
  }
  // std::function needs a copyable callable; the message is moved out once.
  auto pending = std::make_shared<Message>(std::move(msg));
  auto finished = [this] {
    activity_done();
    // Last: once the count is zero the destructor may go on.
    std::lock_guard lock(completions_mu_);
    if (--completions_pending_ == 0) completions_cv_.notify_all();
  };
  try {
    event.on_complete([this, to, pending, finished] {
      try {
        const ActorId from = pending->env.source;
        if (!send(to, std::move(*pending), from).ok()) count_dead_letters(1);
      } catch (...) {
        count_dead_letters(1);  // never leave the count up: the destructor waits for it
      }
      finished();
    });
  } catch (...) {
    finished();
    throw;
  }
}

void ActorSystem::set_error_handler(std::function<void(const ActorError&)> handler) {
  std::lock_guard lock(error_mu_);
  error_handler_ = std::move(handler);
}

void ActorSystem::report(ActorError error) {
  errors_.fetch_add(1);
  std::lock_guard lock(error_mu_);
  if (!error_handler_) return;
  // A throwing handler must not take the worker down with it (nor leave the actor marked
  // scheduled): the error it was told about is logged instead.
  try {
    error_handler_(error);
  } catch (const std::exception& e) {
    tandem::log::error("error handler threw '{}' on actor '{}' ('{}': {})", e.what(), error.actor,
                       error.message_type, error.what);
  } catch (...) {
    tandem::log::error("error handler threw on actor '{}' ('{}': {})", error.actor,
                       error.message_type, error.what);
  }
}

void ActorSystem::wait_idle() {
  scheduler_->wait_idle();
}

void ActorSystem::stop() {
  if (!stopped_.exchange(true)) {
    notify_idle();
    timers_->stop();
  }
  // Every call reaches the scheduler: a first stop() from a worker only signals, and the
  // joins happen on a later call from another thread (the destructor at the latest).
  scheduler_->stop();
  // Pending messages die with their actors' inboxes (tensor handles released there).
}

}  // namespace tandem
