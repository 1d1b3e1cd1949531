#pragma once
// An actor owns its state and is touched by one thread at a time. The scheduler sees it only
// as something to resume(budget): it is scheduled when its inbox goes from empty to
// non-empty, handles up to `budget` messages, then yields.
#include <concurrentqueue/concurrentqueue.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "runtime/lanes.hpp"
#include "runtime/message.hpp"
#include "runtime/send_result.hpp"

namespace tandem {

class ActorSystem;
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

  // Handles at most `budget` messages. Returns true when the actor must be resumed again
  // (budget exhausted, or messages arrived meanwhile); false when it went idle, after which
  // the next message to arrive schedules it.
  bool resume(std::size_t budget);

 protected:
  // Handles one message. An exception stops this actor and reaches the system's error
  // handler; the rest of the system keeps running.
  virtual void on_message(Message& msg) = 0;

  // Picks the next message to handle from the lanes and handles it; returns false when
  // nothing can run now (the actor then waits for more messages). The default runs control,
  // then backward, then forward messages in arrival order; stage actors override it to ask
  // their schedule.
  virtual bool handle_next(Lanes& lanes);

  // Called once, on the actor's thread, after it stopped (by error or stop_self()).
  virtual void on_stop() {}

  ActorSystem& system() const { return *system_; }

  // Sends from inside this actor (the envelope's source is this actor).
  template <MessageType T>
  SendResult send(Actor* to, const T& body, std::shared_ptr<void> payload = {});
  SendResult send(Actor* to, Message msg);

  // Stops this actor after the current message; later sends to it fail.
  void stop_self();

  // Runs `m` through on_message with error handling and tracing; for handle_next overrides.
  void dispatch(Message& m);

 private:
  friend class ActorSystem;

  // Both return true when the caller must schedule this actor.
  bool enqueue(Message&& m);
  bool enqueue_bulk(Message* msgs, std::size_t n);
  bool claim();
  void fail(const Message& m, std::string_view what);
  void discard_all();

  std::string name_;
  ActorId id_ = 0;
  ActorSystem* system_ = nullptr;
  moodycamel::ConcurrentQueue<Message> inbox_;
  moodycamel::ConsumerToken inbox_token_{inbox_};  // only the running actor dequeues
  // True while the actor is queued or running: set by the sender that finds it idle, cleared
  // by resume() when it runs out of work, so it never runs on two threads at once.
  alignas(64) std::atomic<bool> scheduled_{false};
  std::atomic<bool> stopped_{false};
  bool stop_reported_ = false;
  Lanes lanes_;
};

}  // namespace tandem
