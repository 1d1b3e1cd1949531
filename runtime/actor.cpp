#include "runtime/actor.hpp"

#include <exception>
#include <thread>

#include "runtime/actor_system.hpp"
#include "runtime/message_registry.hpp"
#include "runtime/scheduler.hpp"
#include "runtime/trace_recorder.hpp"

namespace tandem {
namespace {
constexpr std::size_t kBulk = 16;
}  // namespace

// Dekker-style hand-off between senders and the actor going idle: a sender publishes its
// message, then looks at the flag; the actor clears the flag, then looks at the inbox. Both
// sides' first step is a seq_cst read-modify-write (the sender's the compare-exchange of the
// inbox's head in Mailbox::push, the actor's the exchange in resume()), so at least one of
// them sees the other: a message is never stranded and the actor is never scheduled twice.
// They are atomic operations rather than standalone fences because ThreadSanitizer models
// the former and not the latter. While the actor is scheduled, senders only read the flag
// (no read-modify-write on it per message).
bool Actor::claim() {
  return !scheduled_.load(std::memory_order_seq_cst) &&
         !scheduled_.exchange(true, std::memory_order_acq_rel);
}

bool Actor::run_next() {
  try {
    return handle_next(lanes_);
  } catch (const std::exception& e) {
    fail("<handle_next>", e.what(), std::current_exception());
  } catch (...) {
    fail("<handle_next>", "unknown exception", std::current_exception());
  }
  return false;
}

bool Actor::resume(std::size_t budget) {
  std::size_t handled = 0;
  while (!failed_) {
    if (handled == budget) {
      // Budget exhausted with work left (or a stop to complete): go to the back.
      if (!lanes_.empty() || (stopped_.load(std::memory_order_relaxed) && !quiesced_)) {
        return true;
      }
      break;
    }
    if (!lanes_.empty() && run_next()) {
      ++handled;
      continue;
    }
    if (inbox_.pop_into(&lanes_, kBulk) != 0) continue;
    if (!stopped_.load(std::memory_order_seq_cst) || quiesced_) break;
    // Stopped: what is in the inbox was accepted (its senders were told ok) and is still
    // handled. Closed, the inbox refuses every later send; a push that got in before may still
    // be linking its message: until it has, look again soon, staying scheduled.
    inbox_.close();
    if (inbox_.has_pending()) return true;
    quiesced_ = true;
  }
  if (failed_ || quiesced_) finish();
  scheduled_.exchange(false, std::memory_order_seq_cst);
  if (!inbox_.has_pending()) return false;
  // A message arrived while we were finishing: resume again, unless its sender already
  // claimed the actor (and scheduled it) after our store.
  return !scheduled_.exchange(true, std::memory_order_acq_rel);
}

bool Scheduler::resume(Actor& actor, std::size_t budget) {
  return actor.resume(budget);
}

// The actor is done: what is left was accepted but will never be handled (dead letters).
void Actor::finish() {
  std::size_t dropped = lanes_.size();
  lanes_.clear();
  // Closed first, so that no send is told ok after this; what got in before is counted, once
  // its pushes have linked it.
  inbox_.close();
  while (inbox_.has_pending()) {
    const std::size_t n = inbox_.pop_into(nullptr, kBulk);
    if (n == 0) std::this_thread::yield();
    dropped += n;
  }
  if (dropped != 0) system_->count_dead_letters(dropped);
  if (stop_reported_) return;
  stop_reported_ = true;
  try {
    on_stop();
  } catch (const std::exception& e) {
    system_->report(ActorError{name_, "<on_stop>", e.what(), std::current_exception()});
  } catch (...) {
    system_->report(ActorError{name_, "<on_stop>", "unknown exception", std::current_exception()});
  }
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
    fail(message_type_name(m.type()), e.what(), std::current_exception());
  } catch (...) {
    fail(message_type_name(m.type()), "unknown exception", std::current_exception());
  }
  if (trace != nullptr) {
    trace->complete(message_type_name(m.type()), "actor", id_, start, trace->now_ns() - start);
  }
}

void Actor::stop_self() {
  // Senders that still see it unset are refused by the inbox once resume() closes it.
  stopped_.store(true, std::memory_order_seq_cst);
}

void Actor::fail(std::string_view message_type, std::string_view what,
                 std::exception_ptr exception) {
  failed_ = true;
  stopped_.store(true, std::memory_order_seq_cst);
  system_->report(
      ActorError{name_, std::string(message_type), std::string(what), std::move(exception)});
}

}  // namespace tandem
