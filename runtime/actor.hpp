#pragma once
// An actor owns its state and is touched by one thread at a time. A scheduler sees it only
// as something to resume(budget) (Scheduler::resume): it is scheduled when its inbox goes
// from empty to non-empty, handles up to `budget` messages, then yields.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "runtime/lanes.hpp"
#include "runtime/mailbox.hpp"
#include "runtime/message.hpp"
#include "runtime/send_result.hpp"

namespace tandem {

class ActorSystem;
class Scheduler;
using ActorId = std::uint32_t;

class Actor {
 public:
  explicit Actor(std::string name) : name_(std::move(name)) {}
  virtual ~Actor() = default;
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  const std::string& name() const { return name_; }
  ActorId id() const { return id_; }
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }
  // Messages accepted and not yet taken in by its thread; from any thread (a lock-free walk of
  // the inbox, exact while the actor takes nothing in and no send is in progress, as when it is
  // stuck in a handler; at most Mailbox::kMaxCounted). What a watchdog reads to tell a busy
  // actor from an idle one without touching its state.
  std::size_t inbox_size() const { return inbox_.size_approx(); }

 protected:
  // Handles one message. An exception stops this actor and reaches the system's error
  // handler; the rest of the system keeps running. Messages still queued become dead letters.
  virtual void on_message(Message& msg) = 0;

  // Picks the next message to handle from the lanes and handles it; returns false when
  // nothing can run now (the actor then waits for more messages). The default runs control,
  // then backward, then forward messages in arrival order; stage actors override it to ask
  // their schedule. An exception stops the actor, as one from on_message() does.
  virtual bool handle_next(Lanes& lanes);

  // Called once, on the actor's thread, after it stopped (by error or stop_self()). An
  // exception is reported to the error handler.
  virtual void on_stop() {}

  ActorSystem& system() const { return *system_; }

  // Sends from inside this actor (the envelope's source is this actor).
  template <MessageType T>
  SendResult send(Actor* to, const T& body, std::vector<Tensor> tensors = {}, Tag tag = {});
  SendResult send(Actor* to, Message msg);

  // Stops accepting messages: later sends fail (target_stopped). The messages whose send
  // already succeeded are still handled (a sender told "ok" can count on it), unless the
  // policy never takes them (then they are dead letters); then on_stop() runs.
  void stop_self();

  // Runs `m` through on_message with error handling and tracing; for handle_next overrides.
  void dispatch(Message& m);

 private:
  friend class ActorSystem;
  friend class Scheduler;  // resume(), through Scheduler::resume for every scheduler

  // Handles at most `budget` messages. Returns true when the actor must be resumed again
  // (budget exhausted, or messages arrived meanwhile); false when it went idle, after which
  // the next message to arrive schedules it.
  bool resume(std::size_t budget);

  // After a sender published into the inbox: true when it must schedule this actor.
  bool claim();
  bool run_next();
  void fail(std::string_view message_type, std::string_view what, std::exception_ptr exception);
  void finish();

  std::string name_;
  ActorId id_ = 0;
  ActorSystem* system_ = nullptr;
  Mailbox inbox_;
  // True while the actor is queued or running: set by the sender that finds it idle, cleared
  // by resume() when it runs out of work, so it never runs on two threads at once.
  alignas(64) std::atomic<bool> scheduled_{false};
  // Set when the actor stops accepting messages (stop_self() or an error); senders read it
  // between announcing their send and publishing it (see ActorSystem::send).
  std::atomic<bool> stopped_{false};
  bool failed_ = false;    // stopped by an error: what is queued is dropped, not handled
  bool quiesced_ = false;  // stopped, and no sender can publish any more: the inbox is final
  bool stop_reported_ = false;
  Lanes lanes_;
};

}  // namespace tandem
