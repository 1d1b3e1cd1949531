#pragma once
// An actor's inbox: any thread pushes, only the thread running the actor pops. A linked
// multi-producer, single-consumer queue: a push is one exchange on the queue's head and a
// pop takes no read-modify-write at all, since one consumer owns the tail. Nodes are recycled
// through a per-thread cache, so a steady stream of messages allocates nothing.
#include <atomic>
#include <cstddef>

#include "runtime/message.hpp"

namespace tandem {

class Lanes;
namespace detail {
struct MessageNode;
}

class Mailbox {
 public:
  Mailbox();
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Publishes `msg`; false (and `msg` dropped) when the mailbox is closed. The compare-exchange
  // of the head that publishes it is sequentially consistent: a sender's later read of the
  // actor's `scheduled` flag cannot be ordered before it (the hand-off in Actor::claim), and
  // close() is ordered with it: a push either lands before the close or fails.
  bool push(Message&& msg);
  // Moves msgs[0..n) in, in order and contiguously (one compare-exchange); false when closed
  // (then none is in).
  bool push_bulk(Message* msgs, std::size_t n);
  // Consumer side: moves up to `max` messages into their lanes (nullptr: drops them) and
  // returns how many it took. A push whose compare-exchange is done but whose link is not yet
  // written is not taken yet; has_pending() reports it.
  std::size_t pop_into(Lanes* lanes, std::size_t max);
  // Consumer side: whether any push has published since the last pop took everything. A
  // sequentially consistent read of the head, the other half of the hand-off.
  bool has_pending() const;
  // Consumer side: every later push fails. What was pushed before stays to be popped (a push
  // may still be linking it: has_pending() tells). Idempotent.
  void close();
  // Any thread: messages pushed and not yet popped, counted by walking the queue (at most
  // kMaxCounted). Exact while the consumer does not pop and no push is in progress (an actor
  // stuck in a handler); approximate otherwise, never unsafe: nodes are never freed.
  std::size_t size_approx() const;
  static constexpr std::size_t kMaxCounted = std::size_t{1} << 16;

  using Node = detail::MessageNode;

 private:
  bool publish(Node* first, Node* last);

  // The newest node; producers compare-exchange it. Its low bit set: closed (nodes are
  // 64-byte aligned).
  alignas(64) std::atomic<Node*> head_;
  // The consumed stub; its successor is the oldest message. Written by the consumer only,
  // atomic for size_approx().
  alignas(64) std::atomic<Node*> tail_;
};

}  // namespace tandem
