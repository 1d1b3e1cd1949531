#include "transport/local_channel.hpp"

#include <stdexcept>
#include <string>

namespace tandem::transport {

void LocalChannel::bind(Endpoint e, Actor* actor) {
  if (e < 0) throw std::invalid_argument("LocalChannel::bind: negative endpoint");
  if (static_cast<std::size_t>(e) >= actors_.size()) actors_.resize(e + 1, nullptr);
  actors_[e] = actor;
}

Actor* LocalChannel::actor(Endpoint e) const {
  if (e < 0 || static_cast<std::size_t>(e) >= actors_.size() || actors_[e] == nullptr) {
    throw std::out_of_range("LocalChannel: no actor bound to endpoint " + std::to_string(e));
  }
  return actors_[e];
}

SendResult LocalChannel::send(Endpoint from, Endpoint to, Message msg) {
  return system_.send(actor(to), std::move(msg), actor(from)->id());
}

}  // namespace tandem::transport
