#pragma once
// The nodes a Mailbox links its messages in, and where they come from. Nodes live in slabs
// that are never freed: the pool keeps the peak number of messages in flight, as a block queue
// keeps its blocks. Each thread takes nodes from a batch and gives popped ones into another;
// threads trade whole batches under a lock, so a fan-in, whose consumer frees what its
// producers take, locks once per kBatch messages, and a request/response pair (the popping
// thread sends next) touches no lock at all. Batches are arrays, not lists: taking a node
// never waits on the previous node's line.
#include <atomic>
#include <cstddef>

#include "runtime/message.hpp"

namespace tandem::detail {

// Two whole cache lines: a node shares no line with its neighbours in a slab.
struct alignas(64) MessageNode {
  std::atomic<MessageNode*> next{nullptr};
  Message msg;
};

// A free node of this thread's batch. Its message is empty; `next` is unspecified.
MessageNode* take_message_node();
// `n`'s message has been moved out or dropped already. Kept in the order given: a producer
// that takes the batch again writes its nodes in the order a consumer read them.
void give_message_node(MessageNode* n);

}  // namespace tandem::detail
