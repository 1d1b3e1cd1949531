#pragma once
// The frames the `cuda-ipc` data plane adds to the tcp wire format (wire_message.hpp) on its
// streams. They share the wire's 16-byte prefix size but have a magic of their own, so that a
// reader tells them apart from the prefix alone:
//   prefix: u32 magic 'TDDI' | u16 version | u8 kind | u8 0 | u64 body bytes
//   tensors: u8 n | u8 slot[n] | cuda_ipc_descriptor.hpp's list of n descriptors. The message
//            frame that follows at once carries the message; its tensors at `slot` travel as
//            these descriptors (their bytes are not in its data part).
//   ack:     u64 seq (the receiver's copies of the tensors of `seq` have run)
//   probe:   u8 ok | ok: a list of one descriptor (memory the peer tries to map);
//            otherwise why this side cannot export memory (UTF-8)
//   answer:  u8 ok | why mapping the probe failed (UTF-8, empty when ok)
// Bodies are at most kMaxCudaIpcBodyBytes; every field from another process is checked, and a
// failure throws WireError naming the frame and the field.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "transport/cuda_ipc_descriptor.hpp"

namespace tandem::transport {

inline constexpr std::uint32_t kCudaIpcFrameMagic = 0x49444454;  // "TDDI" on the wire
inline constexpr std::uint16_t kCudaIpcFrameVersion = 1;
inline constexpr std::size_t kCudaIpcPrefixBytes = 16;
inline constexpr std::size_t kMaxCudaIpcBodyBytes = 16384;
inline constexpr std::size_t kMaxCudaIpcReasonBytes = 1024;

enum class CudaIpcFrameKind : std::uint8_t { tensors = 1, ack = 2, probe = 3, answer = 4 };

struct CudaIpcPrefix {
  CudaIpcFrameKind kind = CudaIpcFrameKind::ack;
  std::uint64_t body_bytes = 0;
};

// The tensors of a message that travel as descriptors, and where they go in it.
struct CudaIpcSlots {
  std::vector<std::uint8_t> slots;  // strictly increasing tensor indices
  std::vector<CudaIpcTensor> tensors;
};

// A probe or its answer: whether IPC works, and why not.
struct CudaIpcProbe {
  bool ok = false;
  CudaIpcTensor tensor;  // a probe's memory, when ok
  std::string why;
};

// Whether a prefix (at least 4 bytes) starts one of these frames rather than a wire frame.
bool is_cuda_ipc_frame(std::span<const std::byte> prefix);
// Exactly kCudaIpcPrefixBytes: magic, version, a known kind, a body of at most
// kMaxCudaIpcBodyBytes (exactly 8 for an ack).
CudaIpcPrefix decode_cuda_ipc_prefix(std::span<const std::byte> prefix);

std::vector<std::byte> encode_cuda_ipc_slots(const CudaIpcSlots& s);
std::vector<std::byte> encode_cuda_ipc_ack(std::uint64_t seq);
std::vector<std::byte> encode_cuda_ipc_probe(const CudaIpcProbe& p);
std::vector<std::byte> encode_cuda_ipc_answer(const CudaIpcProbe& p);

// Bodies (after the prefix). Slots: at most kMaxWireTensors, strictly increasing, as many as
// descriptors, each descriptor's bytes <= max_bytes.
CudaIpcSlots decode_cuda_ipc_slots(std::span<const std::byte> body, std::uint64_t max_bytes);
std::uint64_t decode_cuda_ipc_ack(std::span<const std::byte> body);
CudaIpcProbe decode_cuda_ipc_probe(std::span<const std::byte> body);
CudaIpcProbe decode_cuda_ipc_answer(std::span<const std::byte> body);

}  // namespace tandem::transport
