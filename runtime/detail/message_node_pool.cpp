#include "runtime/detail/message_node_pool.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace tandem::detail {
namespace {

constexpr std::size_t kBatch = 256;
constexpr std::size_t kAhead = 4;  // nodes prefetched ahead of the one taken

struct Batch {
  std::array<MessageNode*, kBatch> nodes;
  std::size_t size = 0;
};

// Full batches and empty ones: a thread trades an empty batch for a full one and the other way
// round, so batches circulate instead of being allocated on one thread and freed on another.
class Pool {
 public:
  // A full batch (a given one, or a new slab's nodes in address order) for `empty`.
  std::unique_ptr<Batch> trade_for_full(std::unique_ptr<Batch> empty) {
    {
      std::lock_guard lock(mu_);
      if (empty != nullptr) empties_.push_back(std::move(empty));
      if (!full_.empty()) {
        auto b = std::move(full_.back());
        full_.pop_back();
        return b;
      }
    }
    auto* slab = new MessageNode[kBatch];
    auto b = std::make_unique<Batch>();
    for (std::size_t i = 0; i < kBatch; ++i) b->nodes[kBatch - 1 - i] = &slab[i];
    b->size = kBatch;
    return b;
  }
  // An empty batch for `full`.
  std::unique_ptr<Batch> trade_for_empty(std::unique_ptr<Batch> full) {
    std::lock_guard lock(mu_);
    if (full != nullptr && full->size != 0) full_.push_back(std::move(full));
    if (empties_.empty()) return std::make_unique<Batch>();
    auto b = std::move(empties_.back());
    empties_.pop_back();
    b->size = 0;
    return b;
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Batch>> full_;
  std::vector<std::unique_ptr<Batch>> empties_;
};

// Never destroyed: threads may still send while static objects are torn down.
Pool& pool() {
  static auto* p = new Pool;
  return *p;
}

// Takes from the back of `taking_`; gives to `filling_`, which it takes from itself next when
// `taking_` runs out (a request/response pair cycles through hot nodes). Full batches go to the
// pool sorted by descending address, so that nodes are taken in address order: a sender's
// consecutive messages then mostly lie in consecutive nodes of a slab, which the consumer
// prefetches (Mailbox::pop_into) instead of missing once per link it follows. Without the sort,
// nodes recycled through many queues end up scattered.
void sort_for_taking(Batch& b) {
  std::sort(b.nodes.begin(), b.nodes.begin() + static_cast<std::ptrdiff_t>(b.size),
            std::greater<>());
}

class ThreadNodes {
 public:
  ~ThreadNodes() {
    pool().trade_for_empty(std::move(taking_));
    pool().trade_for_empty(std::move(filling_));
  }
  MessageNode* take() {
    if (taking_ == nullptr || taking_->size == 0) refill();
    const std::size_t i = --taking_->size;
    // A node's lines were last written by whoever popped it, often long ago or on another
    // core: ask for those a few sends ahead now, for writing.
    if (i >= kAhead) {
      const auto* ahead = reinterpret_cast<const char*>(taking_->nodes[i - kAhead]);
      __builtin_prefetch(ahead, 1);
      __builtin_prefetch(ahead + 64, 1);
    }
    return taking_->nodes[i];
  }
  void give(MessageNode* n) {
    if (filling_ == nullptr) filling_ = std::make_unique<Batch>();
    filling_->nodes[filling_->size++] = n;
    if (filling_->size == kBatch) {
      sort_for_taking(*filling_);
      filling_ = pool().trade_for_empty(std::move(filling_));
    }
  }

 private:
  void refill() {
    if (filling_ != nullptr && filling_->size != 0) {
      std::swap(taking_, filling_);  // this thread's own recent nodes, still in its cache
      return;
    }
    taking_ = pool().trade_for_full(std::move(taking_));
  }

  std::unique_ptr<Batch> taking_;
  std::unique_ptr<Batch> filling_;
};

ThreadNodes& thread_nodes() {
  thread_local ThreadNodes nodes;
  return nodes;
}

}  // namespace

MessageNode* take_message_node() {
  return thread_nodes().take();
}

void give_message_node(MessageNode* n) {
  thread_nodes().give(n);
}

}  // namespace tandem::detail
