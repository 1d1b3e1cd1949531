#pragma once
// The in-process channel: endpoints are actors of one ActorSystem; a send moves the message
// (tensor handles included, no data copied) into the peer's inbox.
#include <vector>

#include "runtime/actor_system.hpp"
#include "transport/channel.hpp"

namespace tandem::transport {

class LocalChannel final : public ActorChannel {
 public:
  explicit LocalChannel(ActorSystem& system) : system_(system) {}

  void bind(Endpoint e, Actor* actor) override;
  SendResult send(Endpoint from, Endpoint to, Message msg) override;

 private:
  Actor* actor(Endpoint e) const;

  ActorSystem& system_;
  std::vector<Actor*> actors_;
};

}  // namespace tandem::transport
