#include "runtime/actor.hpp"

#include <exception>

#include "runtime/actor_system.hpp"
#include "runtime/message_registry.hpp"
#include "runtime/trace_recorder.hpp"

namespace tandem {
namespace {
constexpr std::size_t kBulk = 16;

// Output iterator for moodycamel's bulk dequeue: messages go straight into their lanes, with
// no staging buffer to construct and destroy on every resume.
class LaneInserter {
 public:
  explicit LaneInserter(Lanes* lanes) : lanes_(lanes) {}
  LaneInserter& operator*() { return *this; }
  LaneInserter& operator=(Message&& m) {
    if (lanes_ != nullptr) lanes_->push(std::move(m));
    return *this;
  }
  LaneInserter& operator++() { return *this; }
  LaneInserter operator++(int) { return *this; }

 private:
  Lanes* lanes_;  // nullptr: discard (messages to a stopped actor)
};
}  // namespace

// Dekker-style hand-off between senders and the actor going idle: a sender publishes its
// message, then looks at the flag; the actor clears the flag, then looks at the inbox. The
// seq_cst fences guarantee that at least one of them sees the other, so a message is never
// stranded and the actor is never scheduled twice. While the actor is scheduled, senders
// only read the flag (no read-modify-write on a shared line per message): that is what
// makes fan-in cheap.
bool Actor::claim() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return !scheduled_.load(std::memory_order_relaxed) &&
         !scheduled_.exchange(true, std::memory_order_acq_rel);
}

bool Actor::enqueue(Message&& m) {
  inbox_.enqueue(std::move(m));
  return claim();
}

bool Actor::enqueue_bulk(Message* msgs, std::size_t n) {
  inbox_.enqueue_bulk(std::make_move_iterator(msgs), n);
  return claim();
}

bool Actor::resume(std::size_t budget) {
  std::size_t handled = 0;
  while (handled < budget && !stopped()) {
    if (!lanes_.empty() && handle_next(lanes_)) {
      ++handled;
      continue;
    }
    if (inbox_.try_dequeue_bulk(inbox_token_, LaneInserter(&lanes_), kBulk) == 0) break;
  }
  if (stopped()) {
    // Messages that reached a stopped actor are dead letters: counted, never delivered.
    std::size_t dropped = lanes_.size();
    lanes_.clear();
    std::size_t n;
    while ((n = inbox_.try_dequeue_bulk(inbox_token_, LaneInserter(nullptr), kBulk)) != 0) {
      dropped += n;
    }
    if (dropped != 0) system_->count_dead_letters(dropped);
    if (!stop_reported_) {
      stop_reported_ = true;
      on_stop();
    }
  } else if (handled == budget && !lanes_.empty()) {
    return true;  // budget exhausted with work left: stay scheduled, go to the back
  }
  scheduled_.store(false, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (inbox_.size_approx() == 0) return false;
  // A message arrived while we were finishing: resume again, unless its sender already
  // claimed the actor (and scheduled it) after our store.
  return !scheduled_.exchange(true, std::memory_order_acq_rel);
}

bool Actor::handle_next(Lanes& lanes) {
  for (Lane lane : {Lane::control, Lane::backward, Lane::forward}) {
    auto& q = lanes[lane];
    if (!q.empty()) {
      Message m = std::move(q.front());
      q.pop_front();
      dispatch(m);
      return true;
    }
  }
  return false;
}

void Actor::dispatch(Message& m) {
  TraceRecorder* trace = system_->trace();
  std::int64_t start = 0;
  if (trace != nullptr) {
    start = trace->now_ns();
    if (m.trace_flow != 0) trace->flow_end(m.trace_flow, id_, "msg", start);
  }
  try {
    on_message(m);
  } catch (const std::exception& e) {
    fail(m, e.what());
  } catch (...) {
    fail(m, "unknown exception");
  }
  if (trace != nullptr) {
    trace->complete(message_type_name(m.type()), "actor", id_, start, trace->now_ns() - start);
  }
}

void Actor::stop_self() {
  stopped_.store(true, std::memory_order_release);
}

void Actor::fail(const Message& m, std::string_view what) {
  stopped_.store(true, std::memory_order_release);
  system_->report(ActorError{name_, std::string(message_type_name(m.type())), std::string(what)});
}

}  // namespace tandem
