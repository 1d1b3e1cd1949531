#pragma once
// Out-of-line templates of Actor that need the full ActorSystem.
#include "runtime/actor.hpp"

namespace tandem {

template <MessageType T>
SendResult Actor::send(Actor* to, const T& body, std::vector<Tensor> tensors, Tag tag) {
  return system_->send(to, make_message(body, std::move(tensors), tag), id_);
}

inline SendResult Actor::send(Actor* to, Message msg) {
  return system_->send(to, std::move(msg), id_);
}

}  // namespace tandem
