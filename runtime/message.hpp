#pragma once
// A message: a trivially copyable envelope (header, tag, typed body) plus the tensors that ride
// beside it: handles in-process, the payload across processes.
//
// A typed message is a trivially copyable struct of at most 24 bytes that names itself:
//   struct Ping { static constexpr std::string_view kName = "ping"; int seq; };
// and may pick its lane with `static constexpr Lane kLane = Lane::forward;`.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "runtime/envelope.hpp"
#include "runtime/message_registry.hpp"
#include "runtime/tensor.hpp"

namespace tandem {

template <class T>
concept MessageType = std::is_trivially_copyable_v<T> && sizeof(T) <= kEnvelopeBodyBytes &&
                      alignof(T) <= 8 && requires {
  { T::kName } -> std::convertible_to<std::string_view>;
};

template <MessageType T>
constexpr Lane lane_of() {
  if constexpr (requires { T::kLane; }) {
    return T::kLane;
  } else {
    return Lane::control;
  }
}

template <MessageType T>
constexpr std::uint32_t type_id_of() {
  return message_type_id(T::kName);
}

struct Message {
  Envelope env;
  std::vector<Tensor> tensors;   // typed payload: activations, gradients, targets
  std::uint64_t trace_flow = 0;  // non-zero when a trace recorder follows this message

  std::uint32_t type() const { return env.type; }
  Lane lane() const { return env.lane; }

  template <MessageType T>
  bool is() const {
    return env.type == type_id_of<T>();
  }

  // Reads the typed body; throws when the message is of another type.
  template <MessageType T>
  T as() const {
    if (!is<T>()) {
      throw std::logic_error("message is '" + std::string(message_type_name(env.type)) +
                             "', not '" + std::string(T::kName) + "'");
    }
    T value;
    std::memcpy(&value, env.body, sizeof(T));
    return value;
  }

  const Tag& tag() const { return env.tag; }
};

template <MessageType T>
Message make_message(const T& body, std::vector<Tensor> tensors = {}, Tag tag = {}) {
  static const bool registered = (register_message_type(type_id_of<T>(), T::kName), true);
  (void)registered;
  Message m;
  m.env.type = type_id_of<T>();
  m.env.lane = lane_of<T>();
  std::memcpy(m.env.body, &body, sizeof(T));
  m.env.tag = tag;
  m.tensors = std::move(tensors);
  return m;
}

}  // namespace tandem
