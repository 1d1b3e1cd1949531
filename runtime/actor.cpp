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

bool Actor::enqueue(Message&& m) {
  const bool first = pending_.fetch_add(1, std::memory_order_acq_rel) == 0;
  inbox_.enqueue(std::move(m));
  return first;
}

std::size_t Actor::enqueue_bulk(Message* msgs, std::size_t n) {
  const auto before = pending_.fetch_add(static_cast<std::uint32_t>(n), std::memory_order_acq_rel);
  inbox_.enqueue_bulk(std::make_move_iterator(msgs), n);
  return before;
}

bool Actor::resume(std::size_t budget) {
  std::uint32_t taken = held_;
  held_ = 0;
  std::size_t handled = 0;
  while (handled < budget && !stopped()) {
    if (!lanes_.empty() && handle_next(lanes_)) {
      ++handled;
      continue;
    }
    const std::size_t n = inbox_.try_dequeue_bulk(inbox_token_, LaneInserter(&lanes_), kBulk);
    if (n == 0) break;
    taken += static_cast<std::uint32_t>(n);
  }
  if (stopped()) {
    // Messages that reached a stopped actor are dead letters: counted, never delivered.
    std::size_t dropped = lanes_.size();
    lanes_.clear();
    std::size_t n;
    while ((n = inbox_.try_dequeue_bulk(inbox_token_, LaneInserter(nullptr), kBulk)) != 0) {
      taken += static_cast<std::uint32_t>(n);
      dropped += n;
    }
    if (dropped != 0) system_->count_dead_letters(dropped);
    if (!stop_reported_) {
      stop_reported_ = true;
      on_stop();
    }
  } else if (handled == budget && !lanes_.empty()) {
    // Budget exhausted with work left in the lanes: keep one count so a sender cannot
    // schedule us a second time while we are still queued for more work.
    if (taken > 0) {
      pending_.fetch_sub(taken - 1, std::memory_order_acq_rel);
      held_ = 1;
    }
    return true;
  }
  const std::uint32_t before = pending_.fetch_sub(taken, std::memory_order_acq_rel);
  return before != taken;
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

void Actor::stop_self() { stopped_.store(true, std::memory_order_release); }

void Actor::fail(const Message& m, std::string_view what) {
  stopped_.store(true, std::memory_order_release);
  system_->report(ActorError{name_, std::string(message_type_name(m.type())), std::string(what)});
}

}  // namespace tandem
