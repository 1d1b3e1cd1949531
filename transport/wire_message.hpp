#pragma once
// The data plane's wire format: a runtime Message (envelope, typed body, tensors) as bytes, and
// back. Pure functions (no I/O, no state) so that a fuzzer can drive the decoders directly.
//
// Every frame is a 16-byte prefix, a meta part and a data part, integers little-endian:
//   prefix: u32 magic | u16 version | u16 meta bytes | u64 data bytes
// Three kinds of frame, told apart by the magic:
//   'TDDM' message: meta = u64 job | u32 from | u32 to | u32 type | u8 lane | u8 flags |
//          u8 body bytes | u8 tensors | i64 minibatch | i32 begin | i32 end | u8 kind |
//          u8 chunk | u16 aux | body | per tensor: u8 storage | u8 dtype | u8 rank | u8 0 |
//          i64 dims[rank] | u64 bytes;  data = the tensors' bytes, one after the other
//   'TDDH' hello:   meta = u64 job | u32 rank | u16 lane | u16 lanes | u8 nonce[32]
//          (the first frame on a connection: who the sender says it is, and a fresh nonce)
//   'TDDP' proof:   meta = u8 nonce[32] | u8 proof[32]
//          (the sender's own nonce again and its job_proof.hpp proof over both nonces: what
//          makes a hello count; nothing else is accepted from a connection before it checks)
//   'TDDB' goodbye: no meta (an orderly close: the connection's end is not a failure)
// A sim tensor (shape only) travels with as many bytes as its data would have (zeros, dropped
// on arrival), so a link costs a sim pipeline what it costs a real one.
//
// The meta part is small and bounded, so a reader takes it whole, validates it, then reads the
// tensors' bytes straight into freshly allocated tensors (no staging copy).
//
// A message type travels only when both sides list it in a WireTypes with its body size and
// lane: the receiver checks the type, the body size and the lane of every message, then each
// tensor's dtype, rank, dims and byte count (== numel * dtype size), and the sum of the byte
// counts against the data part and a limit. Nothing is read past a buffer; a frame is either
// valid as a whole or refused with a WireError that says which field and why.
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/message.hpp"
#include "transport/channel.hpp"
#include "transport/job_proof.hpp"

namespace tandem::transport {

inline constexpr std::uint32_t kWireMessageMagic = 0x4d444454;  // "TDDM" on the wire
inline constexpr std::uint32_t kWireHelloMagic = 0x48444454;    // "TDDH"
inline constexpr std::uint32_t kWireGoodbyeMagic = 0x42444454;  // "TDDB"
inline constexpr std::uint32_t kWireProofMagic = 0x50444454;    // "TDDP"
// 2: the hello names its lane; 3: the hello carries a nonce and a proof frame follows it.
inline constexpr std::uint16_t kWireVersion = 3;
inline constexpr std::size_t kWirePrefixBytes = 16;
inline constexpr std::size_t kWireHelloMetaBytes = 16 + sizeof(JobNonce);
inline constexpr std::size_t kWireProofMetaBytes = sizeof(JobNonce) + sizeof(JobProof);
// TCP streams one connection may stripe a message over (WireHello::lanes).
inline constexpr std::uint16_t kMaxWireLanes = 8;
// Enough for kMaxWireTensors tensors of rank kMaxWireRank.
inline constexpr std::size_t kMaxWireMetaBytes = 8192;
inline constexpr std::size_t kMaxWireTensors = 32;
inline constexpr int kMaxWireRank = 8;
// Default bound on a message's tensor bytes: what a receiver allocates for one frame.
inline constexpr std::uint64_t kDefaultMaxWireDataBytes = std::uint64_t{4} << 30;

// A frame that cannot be encoded or decoded: the message names the field and, once the
// envelope is read, the message's type and tag.
class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The message types a data plane carries: both ends must list the same ones.
class WireTypes {
 public:
  struct Info {
    std::string_view name;
    std::uint8_t body_bytes = 0;
    Lane lane = Lane::control;
  };

  template <MessageType T>
  WireTypes& add() {
    register_message_type(type_id_of<T>(), T::kName);  // so errors and traces name it
    add(type_id_of<T>(), Info{T::kName, static_cast<std::uint8_t>(sizeof(T)), lane_of<T>()});
    return *this;
  }
  // Throws std::logic_error when `id` is listed with another name, size or lane.
  void add(std::uint32_t id, Info info);
  const Info* find(std::uint32_t id) const;
  std::size_t size() const { return types_.size(); }

 private:
  std::unordered_map<std::uint32_t, Info> types_;
};

// What a receiver accepts.
struct WireRules {
  std::uint64_t job = 0;
  const WireTypes* types = nullptr;  // not owned; required
  std::uint64_t max_data_bytes = kDefaultMaxWireDataBytes;
};

enum class WireFrameKind : std::uint8_t { message, hello, goodbye, proof };

struct WirePrefix {
  WireFrameKind kind = WireFrameKind::message;
  std::uint16_t meta_bytes = 0;
  std::uint64_t data_bytes = 0;
};

// How a tensor travels: undefined (a default Tensor), with its bytes (received on the CPU), or
// as a shape without data (the sim device's tensors).
enum class WireStorage : std::uint8_t { undefined = 0, data = 1, sim = 2 };

struct WireTensorSpec {
  WireStorage storage = WireStorage::undefined;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t bytes = 0;
};

// A message frame's meta part, decoded and validated.
struct WireHead {
  std::uint64_t job = 0;
  Endpoint from = 0;
  Endpoint to = 0;
  Envelope env;  // source and target are 0: actor ids mean nothing in another process
  std::vector<WireTensorSpec> tensors;
};

struct WireHello {
  std::uint64_t job = 0;
  std::uint32_t rank = 0;
  // A connection of several streams (TcpChannel's lanes): which one this is, of how many. The
  // decoder refuses lanes outside [1, kMaxWireLanes] and lane >= lanes.
  std::uint16_t lane = 0;
  std::uint16_t lanes = 1;
  JobNonce nonce{};  // fresh for this connection: the peer's proof is made over it
};

// The answer to a peer's hello: the sender's nonce (the one of its own hello) and its proof,
// make_proof(token, {purpose, job, sender's rank, receiver's rank, lane, this nonce, the
// receiver's nonce}).
struct WireProof {
  JobNonce nonce{};
  JobProof proof{};
};

// A whole message frame decoded (decode_wire_message).
struct WireMessage {
  Endpoint from = 0;
  Endpoint to = 0;
  Message msg;
};

// --- encoding ---
// Prefix and meta part of a message frame; the data part is the bytes of every tensor of
// `msg`, in order (wire_payload; a sim tensor's are zeros). Tensors must be on the CPU or sim (a
// channel copies GPU tensors to the host first). Throws WireError for what a receiver would
// refuse: an unlisted type, another lane, too many tensors, a rank above kMaxWireRank, more
// than max_data_bytes.
std::vector<std::byte> encode_wire_head(std::uint64_t job, Endpoint from, Endpoint to,
                                        const Message& msg, const WireTypes& types,
                                        std::uint64_t max_data_bytes = kDefaultMaxWireDataBytes);
// The tensors' bytes a message frame carries after its head, in order (empty spans skipped).
std::vector<std::span<const std::byte>> wire_payload(const Message& msg);
// Head and payload in one buffer (tests, fuzzing; channels write the parts without copying).
std::vector<std::byte> encode_wire_message(std::uint64_t job, Endpoint from, Endpoint to,
                                           const Message& msg, const WireTypes& types);
std::vector<std::byte> encode_wire_hello(const WireHello& hello);
std::vector<std::byte> encode_wire_proof(const WireProof& proof);
std::vector<std::byte> encode_wire_goodbye();

// --- decoding ---
// Validates a prefix (exactly kWirePrefixBytes): magic, version, the meta size for the kind
// (at most kMaxWireMetaBytes; exactly kWireHelloMetaBytes or kWireProofMetaBytes for a hello or a
// proof) and no data but in a message frame.
WirePrefix decode_wire_prefix(std::span<const std::byte> bytes);
// Decodes a message frame's meta part (exactly `meta`) whose data part is `data_bytes` long.
WireHead decode_wire_head(std::span<const std::byte> meta, std::uint64_t data_bytes,
                          const WireRules& rules);
WireHello decode_wire_hello(std::span<const std::byte> meta);
WireProof decode_wire_proof(std::span<const std::byte> meta);
// Fresh tensors for a decoded head: CPU tensors of the sent dtype and shape (to be filled with
// the data part, in order), sim tensors, undefined tensors.
std::vector<Tensor> allocate_wire_tensors(const WireHead& head);
// Where the data part goes: the allocated tensors' bytes, in order (empty spans skipped); a
// sim tensor's go to a scratch buffer of the calling thread (the spans stay valid on it until
// its next call).
std::vector<std::span<std::byte>> wire_receive_buffers(std::vector<Tensor>& tensors);
// A whole message frame in one buffer that must hold exactly one frame.
WireMessage decode_wire_message(std::span<const std::byte> bytes, const WireRules& rules);

// "'pipeline.forward_tensor' from endpoint 0 to 1, minibatch 3 samples [0, 4) kind 1 chunk 0"
std::string describe_wire_head(const WireHead& head);

}  // namespace tandem::transport
