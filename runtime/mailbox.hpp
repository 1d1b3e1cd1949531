#pragma once
// An actor's inbox: any thread pushes, only the thread running the actor pops. A lock-free
// multi-producer queue (moodycamel's) behind an interface of four calls, so that embedders
// do not inherit its header; one allocation per mailbox, none per message.
#include <cstddef>
#include <memory>

#include "runtime/message.hpp"

namespace tandem {

class Lanes;

class Mailbox {
 public:
  Mailbox();
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  void push(Message&& msg);
  // Moves msgs[0..n) in, in order.
  void push_bulk(Message* msgs, std::size_t n);
  // Consumer side: moves up to `max` messages into their lanes (nullptr: drops them) and
  // returns how many it took.
  std::size_t pop_into(Lanes* lanes, std::size_t max);
  // Exact when no push is in progress.
  std::size_t size_approx() const;

 private:
  struct Queue;
  std::unique_ptr<Queue> queue_;
};

}  // namespace tandem
