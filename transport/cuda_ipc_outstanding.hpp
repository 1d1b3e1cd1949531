#pragma once
// The sending side's messages of the `cuda-ipc` data plane that a peer has not acknowledged
// yet. A cuda tensor travels as a descriptor of its memory (cuda_ipc_descriptor.hpp): the
// receiver reads that memory later, on its own copy stream, so the sender must neither free
// nor reuse it (the caching allocator would hand the block to the next allocation) until the
// receiver says its copy has run. Each message is held here under the seq its descriptors
// carry, with the interprocess events its copies wait on, until the peer's acknowledgement.
//
// Acknowledgements come from another process: one for a seq never sent, or sent and already
// acknowledged, is refused (WireError) and the caller fails the peer, rather than freeing
// memory the peer may still read. When a peer fails or the channel closes, release_all drops
// what it held (a peer that is gone reads nothing more).
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/message.hpp"
#include "transport/cuda_ipc_memory.hpp"

namespace tandem::transport {

class CudaIpcOutstanding {
 public:
  // Holds `msg` and `events`; returns the seq the message's descriptors carry (1, 2, ...).
  std::uint64_t hold(Message msg, std::vector<CudaIpcEvent> events);
  // The receiver's copy of message `seq` ran: its tensors and events are released. Throws
  // WireError naming the seq when it is not held.
  void acknowledge(std::uint64_t seq);
  // Drops every held message; returns how many there were.
  std::size_t release_all();

  std::size_t held() const;
  std::uint64_t held_bytes() const;  // of the held messages' tensors

 private:
  struct Held {
    Message msg;
    std::vector<CudaIpcEvent> events;
    std::uint64_t bytes = 0;
  };

  mutable std::mutex mu_;
  std::uint64_t next_seq_ = 1;
  std::map<std::uint64_t, Held> held_;
  std::uint64_t held_bytes_ = 0;
};

}  // namespace tandem::transport
