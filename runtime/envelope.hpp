#pragma once
// The fixed-size header every message carries: the same bytes travel in-process through a
// mailbox and, inside a wire frame's head (transport/wire_message.hpp), across processes.
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace tandem {

// Which per-kind queue of the receiving actor a message lands in. Schedules pick among lanes.
enum class Lane : std::uint8_t { control = 0, forward = 1, backward = 2 };
inline constexpr std::size_t kLaneCount = 3;

inline constexpr std::size_t kEnvelopeBodyBytes = 24;

// What a message is about, in the header so that a receiver finds "the input of F(b, slice)" by
// key without decoding bodies (docs/architecture.md#runtime). `kind` is the sender's vocabulary
// (activation, gradient, ...); the runtime never interprets the tag.
struct Tag {
  std::int64_t minibatch = -1;  // -1: the message is about no minibatch
  std::int32_t begin = 0;       // samples [begin, end) of the minibatch
  std::int32_t end = 0;
  std::uint8_t kind = 0;
  std::uint8_t chunk = 0;  // model chunk (interleaved schedules)
  std::uint16_t aux = 0;   // sender-defined (e.g. the port of a route)

  friend bool operator==(const Tag&, const Tag&) = default;
};

struct Envelope {
  std::uint32_t type = 0;    // MessageType id (fnv-1a of the type's name)
  std::uint32_t source = 0;  // sending actor id; 0 when sent from outside any actor
  std::uint32_t target = 0;  // receiving actor id
  Lane lane = Lane::control;
  std::uint8_t flags = 0;
  std::uint16_t reserved = 0;
  Tag tag;
  alignas(8) std::byte body[kEnvelopeBodyBytes] = {};
};

static_assert(sizeof(Tag) == 24, "the tag is part of the 64-byte header");
static_assert(sizeof(Envelope) <= 64, "an envelope must fit one cache line");
static_assert(std::is_trivially_copyable_v<Envelope>, "envelopes travel as raw bytes");

}  // namespace tandem
