#include "runtime/mailbox.hpp"

#include <cstdint>
#include <utility>

#include "runtime/detail/message_node_pool.hpp"
#include "runtime/lanes.hpp"

namespace tandem {

namespace {

Mailbox::Node* node_for(Message&& msg) {
  Mailbox::Node* n = detail::take_message_node();
  n->next.store(nullptr, std::memory_order_relaxed);
  n->msg = std::move(msg);
  return n;
}

constexpr std::uintptr_t kClosed = 1;

bool is_closed(const Mailbox::Node* head) {
  return (reinterpret_cast<std::uintptr_t>(head) & kClosed) != 0;
}

Mailbox::Node* unmarked(Mailbox::Node* head) {
  return reinterpret_cast<Mailbox::Node*>(reinterpret_cast<std::uintptr_t>(head) & ~kClosed);
}

// Back to the pool, messages dropped: [first, last] linked through `next`.
void drop_chain(Mailbox::Node* first, Mailbox::Node* last) {
  for (Mailbox::Node* n = first;;) {
    Mailbox::Node* next = n->next.load(std::memory_order_relaxed);
    n->msg = Message{};
    detail::give_message_node(n);
    if (n == last) break;
    n = next;
  }
}

}  // namespace

Mailbox::Mailbox() {
  Node* stub = detail::take_message_node();
  stub->next.store(nullptr, std::memory_order_relaxed);  // a reused node still links its old queue
  head_.store(stub, std::memory_order_relaxed);
  tail_.store(stub, std::memory_order_relaxed);
}

Mailbox::~Mailbox() {
  // What was never popped is dropped; the nodes go back to this thread's cache.
  drop_chain(tail_.load(std::memory_order_relaxed),
             unmarked(head_.load(std::memory_order_relaxed)));
}

bool Mailbox::publish(Node* first, Node* last) {
  Node* prev = head_.load(std::memory_order_relaxed);
  do {
    if (is_closed(prev)) {
      drop_chain(first, last);
      return false;
    }
  } while (!head_.compare_exchange_weak(prev, last, std::memory_order_seq_cst,
                                        std::memory_order_relaxed));
  // Until this store the consumer sees the queue end at `prev` (has_pending() is true).
  prev->next.store(first, std::memory_order_release);
  return true;
}

bool Mailbox::push(Message&& msg) {
  Node* n = node_for(std::move(msg));
  return publish(n, n);
}

bool Mailbox::push_bulk(Message* msgs, std::size_t n) {
  if (n == 0) return !is_closed(head_.load(std::memory_order_acquire));
  Node* first = node_for(std::move(msgs[0]));
  Node* last = first;
  for (std::size_t i = 1; i < n; ++i) {
    Node* next = node_for(std::move(msgs[i]));
    last->next.store(next, std::memory_order_relaxed);
    last = next;
  }
  return publish(first, last);
}

void Mailbox::close() {
  Node* head = head_.load(std::memory_order_relaxed);
  while (!is_closed(head) &&
         !head_.compare_exchange_weak(
             head, reinterpret_cast<Node*>(reinterpret_cast<std::uintptr_t>(head) | kClosed),
             std::memory_order_seq_cst, std::memory_order_relaxed)) {
  }
}

std::size_t Mailbox::pop_into(Lanes* lanes, std::size_t max) {
  Node* tail = tail_.load(std::memory_order_relaxed);
  std::size_t taken = 0;
  while (taken < max) {
    Node* next = tail->next.load(std::memory_order_acquire);
    if (next == nullptr) break;
    // One producer's messages mostly sit in consecutive nodes of a slab: ask for the lines of
    // the next few now rather than miss once per link followed.
    for (int ahead = 4; ahead <= 6; ++ahead) {
      __builtin_prefetch(next + ahead);
      __builtin_prefetch(reinterpret_cast<const char*>(next + ahead) + 64);
    }
    if (Node* after = next->next.load(std::memory_order_relaxed)) {
      __builtin_prefetch(after);
      __builtin_prefetch(reinterpret_cast<const char*>(after) + 64);
    }
    // `next` becomes the stub: its message moves out, the old stub is free.
    if (lanes != nullptr) {
      lanes->push(std::move(next->msg));
    } else {
      next->msg = Message{};  // dropped: its tensors are released now
    }
    detail::give_message_node(std::exchange(tail, next));
    ++taken;
  }
  tail_.store(tail, std::memory_order_relaxed);
  return taken;
}

bool Mailbox::has_pending() const {
  return unmarked(head_.load(std::memory_order_seq_cst)) != tail_.load(std::memory_order_relaxed);
}

std::size_t Mailbox::size_approx() const {
  const Node* n = tail_.load(std::memory_order_acquire);
  const Node* head = unmarked(head_.load(std::memory_order_acquire));
  std::size_t count = 0;
  while (n != head && count < kMaxCounted) {
    n = n->next.load(std::memory_order_acquire);
    if (n == nullptr) break;  // a push not linked yet, or a node recycled under the walk
    ++count;
  }
  return count;
}

}  // namespace tandem
