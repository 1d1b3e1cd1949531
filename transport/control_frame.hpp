#pragma once
// The control plane's wire format: length-prefixed frames, encoded and decoded by pure
// functions (no I/O, no state) so that a fuzzer can drive the decoder directly.
//
// Every frame is a 12-byte header followed by the payload, all integers little-endian:
//   u32 magic 'TDCP' | u16 version | u16 type | u32 payload length
// Payload fields: u8/u32/u64 integers; text and bytes as a u32 length then the bytes. Text is
// printable ASCII only, so nothing a peer sends can inject control characters into logs.
// Decoding checks every length against the bytes left and against a per-field limit before
// it allocates, and refuses trailing bytes: a frame is either valid as a whole or refused.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "transport/job_proof.hpp"

namespace tandem::transport {

inline constexpr std::uint32_t kControlMagic = 0x50434454;  // "TDCP" on the wire
// Version 2: the challenge-response join (join-request, challenge, a hello with a proof),
// kv-take, and heartbeats that carry progress.
inline constexpr std::uint16_t kControlVersion = 2;
inline constexpr std::size_t kFrameHeaderSize = 12;
// Payload bound for an established connection (a peer table of many ranks with their UCX
// worker addresses fits) and the far smaller one for a connection that has not yet said
// hello, so an unauthenticated peer cannot make rank 0 allocate much.
inline constexpr std::uint32_t kMaxFramePayload = 16u << 20;
inline constexpr std::uint32_t kMaxHelloPayload = 96u << 10;
// Per-field limits.
inline constexpr std::size_t kMaxTextField = 4096;
inline constexpr std::size_t kMaxBlobField = 64u << 10;
inline constexpr std::size_t kMaxValueField = 8u << 20;
inline constexpr std::uint32_t kMaxWorldSize = 1u << 16;

// A frame that cannot be decoded: the message says which field and why.
class FrameError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A join runs: join-request (rank -> 0), challenge (0 -> rank), hello (rank -> 0), then the
// peer table once every rank's hello is in (transport/job_proof.hpp says what the proofs are).
enum class FrameType : std::uint16_t {
  kHello = 1,           // rank -> rank 0: registration, with the rank's proof
  kRefused = 2,         // rank 0 -> rank: registration refused (then the connection closes)
  kPeerTable = 3,       // rank 0 -> every rank: all ranks joined
  kBarrierEnter = 4,    // rank -> rank 0
  kBarrierRelease = 5,  // rank 0 -> every rank
  kKvSet = 6,           // rank -> rank 0
  kKvGet = 7,           // rank -> rank 0; answered by kKvValue once the key is set
  kKvValue = 8,         // rank 0 -> rank
  kHeartbeat = 9,       // both ways
  kRankLost = 10,       // rank 0 -> every rank
  kGoodbye = 11,        // both ways: an orderly leave (rank) or close (rank 0)
  kJoinRequest = 12,    // rank -> rank 0: the first frame of a connection
  kChallenge = 13,      // rank 0 -> rank: its nonces and its proof
  kKvTake = 14,         // rank -> rank 0; answered by kKvValue, and the key is gone
};
inline constexpr FrameType kLastFrameType = FrameType::kKvTake;

// One rank as the others see it.
struct PeerInfo {
  std::uint32_t rank = 0;
  std::string host;
  std::vector<std::byte> blob;  // opaque to the control plane (a UCX worker address)
  std::string devices;

  bool operator==(const PeerInfo&) const = default;
};

// What a connecting process says before it has proved anything: who it claims to be and its
// fresh nonce, nothing else.
struct JoinRequest {
  std::uint32_t rank = 0;
  std::uint32_t world_size = 0;
  JobNonce client_nonce{};
  bool operator==(const JoinRequest&) const = default;
};
// Rank 0's answer: its nonce for this connection, the job's nonce, and its proof
// (ProofPurpose::kControlAdmit) that it holds the job token.
struct Challenge {
  JobNonce server_nonce{};
  JobNonce job{};
  JobProof proof{};
  bool operator==(const Challenge&) const = default;
};
// The registration, sent only once rank 0 proved itself; `proof` is the rank's
// (ProofPurpose::kControlJoin).
struct Hello {
  PeerInfo self;
  JobProof proof{};
  bool operator==(const Hello&) const = default;
};
struct Refused {
  std::string reason;
  bool operator==(const Refused&) const = default;
};
struct PeerTable {
  std::vector<PeerInfo> peers;  // indexed by rank, every rank of the world once
  bool operator==(const PeerTable&) const = default;
};
struct BarrierEnter {
  std::string name;
  bool operator==(const BarrierEnter&) const = default;
};
struct BarrierRelease {
  std::string name;
  bool operator==(const BarrierRelease&) const = default;
};
struct KvSet {
  std::string key;
  std::vector<std::byte> value;
  bool operator==(const KvSet&) const = default;
};
struct KvGet {
  std::uint64_t request = 0;
  std::string key;
  bool operator==(const KvGet&) const = default;
};
struct KvValue {
  std::uint64_t request = 0;
  std::vector<std::byte> value;
  bool operator==(const KvValue&) const = default;
};
struct KvTake {
  std::uint64_t request = 0;
  std::string key;
  bool operator==(const KvTake&) const = default;
};
// Rank 0's heartbeats carry no progress (all zero); a rank's carry what its progress callback
// last reported (transport/rendezvous.hpp, RankProgress).
struct Heartbeat {
  std::uint64_t completed = 0;
  bool has_work = false;
  std::string waiting_for;
  bool operator==(const Heartbeat&) const = default;
};
struct RankLost {
  std::uint32_t rank = 0;
  std::string host;
  std::string reason;
  bool operator==(const RankLost&) const = default;
};
struct Goodbye {
  bool operator==(const Goodbye&) const = default;
};

using ControlMessage =
    std::variant<Hello, Refused, PeerTable, BarrierEnter, BarrierRelease, KvSet, KvGet, KvValue,
                 Heartbeat, RankLost, Goodbye, JoinRequest, Challenge, KvTake>;

struct FrameHeader {
  FrameType type = FrameType::kHeartbeat;
  std::uint32_t payload_size = 0;
};

FrameType frame_type(const ControlMessage& message);

// The whole frame, header included.
std::vector<std::byte> encode_frame(const ControlMessage& message);

// Validates a header (exactly kFrameHeaderSize bytes): magic, version, a known type and a
// payload no larger than `max_payload`.
FrameHeader decode_header(std::span<const std::byte> bytes, std::uint32_t max_payload);
// Decodes the payload of a frame of type `type`: exactly `payload`, nothing more or less.
ControlMessage decode_payload(FrameType type, std::span<const std::byte> payload);
// Header and payload in one buffer that must hold exactly one frame.
ControlMessage decode_frame(std::span<const std::byte> bytes,
                            std::uint32_t max_payload = kMaxFramePayload);

// The name of a frame type for messages ("hello", "kv-get", ...).
std::string_view frame_type_name(FrameType type);
// Text fit for a log line or a text field: printable ASCII kept, anything else (and '\\') as
// \xNN, cut to at most `limit` bytes with "..." marking the cut.
std::string printable(std::string_view text, std::size_t limit = 64);

}  // namespace tandem::transport
