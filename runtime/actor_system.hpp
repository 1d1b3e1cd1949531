#pragma once
// Owns actors, a scheduler, a timer thread (Asio) and, optionally, a trace recorder.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/actor.hpp"
#include "runtime/event.hpp"
#include "runtime/scheduler.hpp"
#include "runtime/send_result.hpp"

namespace tandem {

class TimerService;
class TraceRecorder;

// What the error handler is told when a handler throws.
struct ActorError {
  std::string actor;         // the actor's name
  std::string message_type;  // the kind of message it was handling
  std::string what;          // the exception's message
  // The exception itself, for callers that tell failures apart by type; null when the error
  // was no exception (a reason given in words).
  std::exception_ptr exception;
};

struct ActorSystemOptions {
  // Messages per resume; 0 (the default): the scheduler's (WorkSharingOptions::budget).
  std::size_t budget = 0;
  TraceRecorder* trace = nullptr;  // not owned; records every handled message when set
};

class ActorSystem {
 public:
  explicit ActorSystem(std::unique_ptr<Scheduler> scheduler, ActorSystemOptions options = {});
  ~ActorSystem();
  ActorSystem(const ActorSystem&) = delete;
  ActorSystem& operator=(const ActorSystem&) = delete;

  // Creates an actor owned by the system; the pointer stays valid until the system dies.
  template <class A, class... Args>
  A* spawn(Args&&... args) {
    auto actor = std::make_unique<A>(std::forward<Args>(args)...);
    A* raw = actor.get();
    adopt(std::move(actor));
    return raw;
  }

  template <MessageType T>
  SendResult send(Actor* to, const T& body, std::vector<Tensor> tensors = {}, Tag tag = {}) {
    return send(to, make_message(body, std::move(tensors), tag));
  }
  SendResult send(Actor* to, Message msg, ActorId from = 0);
  // Sends many messages to one actor with a single wake-up.
  SendResult send_bulk(Actor* to, Message* msgs, std::size_t n, ActorId from = 0);

  // Delivers `msg` to `to` no earlier than `delay` from now (Asio timer thread).
  void send_after(std::chrono::nanoseconds delay, Actor* to, Message msg);
  template <MessageType T>
  void send_after(std::chrono::nanoseconds delay, Actor* to, const T& body) {
    send_after(delay, to, make_message(body));
  }
  // Delivers `msg` to `to` no earlier than `deadline`.
  void send_at(std::chrono::steady_clock::time_point deadline, Actor* to, Message msg);
  template <MessageType T>
  void send_at(std::chrono::steady_clock::time_point deadline, Actor* to, const T& body) {
    send_at(deadline, to, make_message(body));
  }

  // Delivers `msg` to `to` once `event` has completed: how an actor learns that the work it
  // enqueued on an asynchronous device (a cuda stream) is done, without any worker waiting for
  // it. Counts as activity until then, like a timer (wait_idle() does not return before), and
  // the system is not destroyed before the delivery has been attempted. After stop() the message
  // is dropped as a dead letter. The receiver reads the event's error() itself.
  void send_when(const Event& event, Actor* to, Message msg);

  // Called on the failing actor's thread. A handler that throws is logged, not fatal.
  void set_error_handler(std::function<void(const ActorError&)> handler);
  // Called for messages that reached an actor after it stopped.
  std::size_t dead_letters() const { return dead_letters_.load(); }
  std::size_t error_count() const { return errors_.load(); }

  // Blocks until no actor has work and no timer is pending.
  void wait_idle();
  // Stops the workers and the timer thread, drops pending messages, and makes later sends
  // fail. Idempotent, and callable from any thread: from a worker (an actor's handler, the
  // error handler, e.g. a coordinator ending the run) it marks the system stopped and makes
  // the workers exit without joining them; a later stop() from another thread, or the
  // destructor, joins every thread.
  void stop();
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }

  Scheduler& scheduler() { return *scheduler_; }
  TimerService& timers();
  TraceRecorder* trace() const { return options_.trace; }
  std::size_t budget() const {
    return options_.budget != 0 ? options_.budget : scheduler_->budget();
  }

  // Scheduler interface. The count of activity (active()) is the schedulers' to keep: one
  // unit per actor that is scheduled and not yet idle, counted when it is scheduled
  // (actor_scheduled) and released when resume() returns false (actor_went_idle). A scheduler
  // may keep units of its own workers' hand-offs locally and settle them in one step
  // (add_activity), provided the count never reaches 0 while an actor it holds is scheduled.
  void actor_scheduled() { active_.fetch_add(1, std::memory_order_acq_rel); }
  void actor_went_idle() { activity_done(); }
  void add_activity(std::int64_t delta);
  // Number of actors scheduled or timers pending; 0 means idle.
  std::int64_t active() const { return active_.load(std::memory_order_acquire); }
  // Blocks (no polling) until active() is 0 or the system stopped: for thread-pool schedulers'
  // wait_idle().
  void wait_until_quiet();

 private:
  friend class Actor;
  void adopt(std::unique_ptr<Actor> actor);
  SendStatus target_status(const Actor* to) const;
  void schedule(Actor* actor);
  void report(ActorError error);
  void count_dead_letters(std::size_t n) { dead_letters_.fetch_add(n); }
  void activity_done();
  void notify_idle();

  ActorSystemOptions options_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<TimerService> timers_;
  std::mutex actors_mu_;
  std::vector<std::unique_ptr<Actor>> actors_;
  std::atomic<ActorId> next_id_{1};
  alignas(64) std::atomic<std::int64_t> active_{0};
  std::mutex idle_mu_;
  std::condition_variable idle_cv_;
  std::atomic<bool> stopped_{false};
  std::atomic<std::size_t> dead_letters_{0};
  std::atomic<std::size_t> errors_{0};
  std::mutex error_mu_;
  std::function<void(const ActorError&)> error_handler_;
  // Deliveries of send_when() not yet attempted: the destructor waits for them, as their
  // callbacks (on the runtime's progress thread) use this system.
  std::mutex completions_mu_;
  std::condition_variable completions_cv_;
  std::size_t completions_pending_ = 0;
};

// Actor::send's definitions need the complete ActorSystem.
template <MessageType T>
SendResult Actor::send(Actor* to, const T& body, std::vector<Tensor> tensors, Tag tag) {
  return system_->send(to, make_message(body, std::move(tensors), tag), id_);
}

inline SendResult Actor::send(Actor* to, Message msg) {
  return system_->send(to, std::move(msg), id_);
}

}  // namespace tandem
