#pragma once
// The per-kind queues an actor's inbox is drained into. The inbox stays policy-free; an
// actor's handle_next() (or its schedule) decides which lane to pop.
#include <array>
#include <deque>

#include "runtime/envelope.hpp"
#include "runtime/message.hpp"

namespace tandem {

class Lanes {
 public:
  void push(Message&& m) { queues_[static_cast<std::size_t>(m.lane())].push_back(std::move(m)); }
  std::deque<Message>& operator[](Lane l) { return queues_[static_cast<std::size_t>(l)]; }
  const std::deque<Message>& operator[](Lane l) const {
    return queues_[static_cast<std::size_t>(l)];
  }
  bool empty() const { return queues_[0].empty() && queues_[1].empty() && queues_[2].empty(); }
  std::size_t size() const { return queues_[0].size() + queues_[1].size() + queues_[2].size(); }
  void clear() {
    for (auto& q : queues_) q.clear();
  }

 private:
  std::array<std::deque<Message>, kLaneCount> queues_;
};

}  // namespace tandem
