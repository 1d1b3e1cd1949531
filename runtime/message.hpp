#pragma once
// A message: a trivially copyable envelope plus an optional payload handle (a tensor or any
// other shared object) that rides beside it in-process.
//
// A typed message is a trivially copyable struct of at most 48 bytes that names itself:
//   struct Ping { static constexpr std::string_view kName = "ping"; int seq; };
// and may pick its lane with `static constexpr Lane kLane = Lane::forward;`.
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "runtime/envelope.hpp"
#include "runtime/message_registry.hpp"

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
  std::shared_ptr<void> payload;
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

  template <class P>
  std::shared_ptr<P> payload_as() const {
    return std::static_pointer_cast<P>(payload);
  }
};

template <MessageType T>
Message make_message(const T& body, std::shared_ptr<void> payload = {}) {
  static const bool registered = (register_message_type(type_id_of<T>(), T::kName), true);
  (void)registered;
  Message m;
  m.env.type = type_id_of<T>();
  m.env.lane = lane_of<T>();
  std::memcpy(m.env.body, &body, sizeof(T));
  m.payload = std::move(payload);
  return m;
}

}  // namespace tandem
