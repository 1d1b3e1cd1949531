#include "runtime/mailbox.hpp"

#include <concurrentqueue/concurrentqueue.h>

#include <iterator>

#include "runtime/lanes.hpp"

namespace tandem {
namespace {

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

struct Mailbox::Queue {
  moodycamel::ConcurrentQueue<Message> queue;
  moodycamel::ConsumerToken token{queue};  // only the running actor dequeues
};

Mailbox::Mailbox() : queue_(std::make_unique<Queue>()) {}
Mailbox::~Mailbox() = default;

void Mailbox::push(Message&& msg) {
  queue_->queue.enqueue(std::move(msg));
}

void Mailbox::push_bulk(Message* msgs, std::size_t n) {
  queue_->queue.enqueue_bulk(std::make_move_iterator(msgs), n);
}

std::size_t Mailbox::pop_into(Lanes* lanes, std::size_t max) {
  return queue_->queue.try_dequeue_bulk(queue_->token, LaneInserter(lanes), max);
}

std::size_t Mailbox::size_approx() const {
  return queue_->queue.size_approx();
}

}  // namespace tandem
