#include "runtime/actor_system.hpp"

#include <spdlog/spdlog.h>

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
      timers_(std::make_unique<TimerService>()) {
  if (options_.budget == 0) options_.budget = 1;
  error_handler_ = [](const ActorError& e) {
    spdlog::error("actor '{}' stopped while handling '{}': {}", e.actor, e.message_type, e.what);
  };
  scheduler_->start(*this);
}

ActorSystem::~ActorSystem() {
  stop();
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
  if (to->stopped()) return SendStatus::target_stopped;
  return SendStatus::ok;
}

SendResult ActorSystem::send(Actor* to, Message msg, ActorId from) {
  if (const SendStatus s = target_status(to); s != SendStatus::ok) return {s};
  msg.env.source = from;
  msg.env.target = to->id_;
  if (options_.trace != nullptr) {
    msg.trace_flow = options_.trace->next_flow_id();
    options_.trace->flow_start(msg.trace_flow, from, message_type_name(msg.type()),
                               options_.trace->now_ns());
  }
  if (to->enqueue(std::move(msg))) schedule(to);
  return {};
}

SendResult ActorSystem::send_bulk(Actor* to, Message* msgs, std::size_t n, ActorId from) {
  if (const SendStatus s = target_status(to); s != SendStatus::ok) return {s};
  if (n == 0) return {};
  for (std::size_t i = 0; i < n; ++i) {
    msgs[i].env.source = from;
    msgs[i].env.target = to->id_;
  }
  if (to->enqueue_bulk(msgs, n)) schedule(to);
  return {};
}

void ActorSystem::schedule(Actor* actor) {
  active_.fetch_add(1, std::memory_order_acq_rel);
  scheduler_->schedule(actor);
}

void ActorSystem::activity_done() {
  active_.fetch_sub(1, std::memory_order_acq_rel);
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

void ActorSystem::set_error_handler(std::function<void(const ActorError&)> handler) {
  std::lock_guard lock(error_mu_);
  error_handler_ = std::move(handler);
}

void ActorSystem::report(ActorError error) {
  errors_.fetch_add(1);
  std::lock_guard lock(error_mu_);
  if (error_handler_) error_handler_(error);
}

void ActorSystem::wait_idle() {
  scheduler_->wait_idle();
}

void ActorSystem::stop() {
  if (stopped_.exchange(true)) return;
  timers_->stop();
  scheduler_->stop();
  // Pending messages die with their actors' inboxes (payload handles released there).
}

}  // namespace tandem
