#pragma once
// How a pipeline's actors reach each other. Stage actors, the loader and the coordinator are
// endpoints numbered by the pipeline; a channel carries a message (envelope plus tensors) from
// one endpoint to another. In-process it hands the tensor handles over (LocalChannel); the UCX
// and TCP channels implement the same interface, so actors/ never names a transport.
#include "runtime/message.hpp"
#include "runtime/send_result.hpp"

namespace tandem {
class Actor;
}

namespace tandem::transport {

using Endpoint = int;

class Channel {
 public:
  virtual ~Channel() = default;
  // Delivers `msg` from `from` to `to`. Never blocks. A result other than ok means the peer
  // will never see the message (it stopped, or the run is over).
  virtual SendResult send(Endpoint from, Endpoint to, Message msg) = 0;
};

// A channel whose endpoints in this process are actors of one ActorSystem, each bound before the
// run starts (what a pipeline needs to wire its actors to any transport).
class ActorChannel : public Channel {
 public:
  // Registers `actor` as endpoint `e` (before the run starts; not thread-safe).
  virtual void bind(Endpoint e, Actor* actor) = 0;
};

}  // namespace tandem::transport
