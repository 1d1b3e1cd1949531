#include "transport/cuda_ipc_frame.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "transport/byte_reader.hpp"
#include "transport/wire_message.hpp"

namespace tandem::transport {
namespace {

class Reader final : public ByteReader {
 public:
  Reader(std::span<const std::byte> in, std::string_view frame) : ByteReader(in), frame_(frame) {}
  [[noreturn]] void fail(std::string_view field, const std::string& why) const override {
    throw WireError(fmt::format("cuda-ipc {} frame, field '{}': {}", frame_, field, why));
  }
  void end() const {
    if (left() != 0) fail("end", fmt::format("{} bytes after the last field", left()));
  }

 private:
  std::string_view frame_;
};

void put(std::vector<std::byte>& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

std::vector<std::byte> framed(CudaIpcFrameKind kind, const std::vector<std::byte>& body) {
  if (body.size() > kMaxCudaIpcBodyBytes) {
    throw WireError(fmt::format("cuda-ipc frame: a body of {} bytes exceeds {}", body.size(),
                                kMaxCudaIpcBodyBytes));
  }
  std::vector<std::byte> out;
  out.reserve(kCudaIpcPrefixBytes + body.size());
  put(out, kCudaIpcFrameMagic, 4);
  put(out, kCudaIpcFrameVersion, 2);
  put(out, static_cast<std::uint8_t>(kind), 1);
  put(out, 0, 1);
  put(out, body.size(), 8);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<std::byte> flag_and_text(bool ok, const std::string& why) {
  std::vector<std::byte> body{static_cast<std::byte>(ok ? 1 : 0)};
  const std::size_t n = std::min(why.size(), kMaxCudaIpcReasonBytes);
  for (std::size_t i = 0; i < n; ++i) body.push_back(static_cast<std::byte>(why[i]));
  return body;
}

bool flag(Reader& r) {
  const std::uint8_t ok = r.u8("ok");
  if (ok > 1) r.fail("ok", fmt::format("{} is neither 0 nor 1", ok));
  return ok == 1;
}

std::string text(Reader& r) {
  if (r.left() > kMaxCudaIpcReasonBytes) {
    r.fail("why", fmt::format("{} bytes exceed {}", r.left(), kMaxCudaIpcReasonBytes));
  }
  const auto b = r.take("why", r.left());
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

}  // namespace

bool is_cuda_ipc_frame(std::span<const std::byte> prefix) {
  if (prefix.size() < 4) return false;
  std::uint32_t magic = 0;
  for (int i = 0; i < 4; ++i) {
    magic |= std::uint32_t{std::to_integer<std::uint8_t>(prefix[static_cast<std::size_t>(i)])}
             << (8 * i);
  }
  return magic == kCudaIpcFrameMagic;
}

CudaIpcPrefix decode_cuda_ipc_prefix(std::span<const std::byte> prefix) {
  Reader r(prefix, "prefix");
  if (prefix.size() != kCudaIpcPrefixBytes) {
    r.fail("size", fmt::format("{} bytes, expected {}", prefix.size(), kCudaIpcPrefixBytes));
  }
  if (r.u32("magic") != kCudaIpcFrameMagic) r.fail("magic", "not 'TDDI'");
  const std::uint16_t version = r.u16("version");
  if (version != kCudaIpcFrameVersion) {
    r.fail("version", fmt::format("{}, expected {}", version, kCudaIpcFrameVersion));
  }
  const std::uint8_t kind = r.u8("kind");
  if (kind < 1 || kind > 4) r.fail("kind", fmt::format("{} is no cuda-ipc frame", kind));
  if (r.u8("reserved") != 0) r.fail("reserved", "not zero");
  CudaIpcPrefix p{static_cast<CudaIpcFrameKind>(kind), r.u64("body bytes")};
  if (p.body_bytes > kMaxCudaIpcBodyBytes) {
    r.fail("body bytes", fmt::format("{} exceeds {}", p.body_bytes, kMaxCudaIpcBodyBytes));
  }
  if (p.kind == CudaIpcFrameKind::ack && p.body_bytes != 8) {
    r.fail("body bytes", fmt::format("{} for an ack, expected 8", p.body_bytes));
  }
  return p;
}

std::vector<std::byte> encode_cuda_ipc_slots(const CudaIpcSlots& s) {
  if (s.slots.size() != s.tensors.size() || s.slots.size() > kMaxWireTensors) {
    throw WireError(fmt::format("cuda-ipc tensors frame: {} slots for {} descriptors",
                                s.slots.size(), s.tensors.size()));
  }
  std::vector<std::byte> body;
  put(body, s.slots.size(), 1);
  for (const std::uint8_t slot : s.slots) put(body, slot, 1);
  const std::vector<std::byte> list = encode_cuda_ipc_tensors(s.tensors);
  body.insert(body.end(), list.begin(), list.end());
  return framed(CudaIpcFrameKind::tensors, body);
}

std::vector<std::byte> encode_cuda_ipc_ack(std::uint64_t seq) {
  std::vector<std::byte> body;
  put(body, seq, 8);
  return framed(CudaIpcFrameKind::ack, body);
}

std::vector<std::byte> encode_cuda_ipc_probe(const CudaIpcProbe& p) {
  if (!p.ok) return framed(CudaIpcFrameKind::probe, flag_and_text(false, p.why));
  std::vector<std::byte> body{std::byte{1}};
  const std::vector<std::byte> list = encode_cuda_ipc_tensors(std::span(&p.tensor, 1));
  body.insert(body.end(), list.begin(), list.end());
  return framed(CudaIpcFrameKind::probe, body);
}

std::vector<std::byte> encode_cuda_ipc_answer(const CudaIpcProbe& p) {
  return framed(CudaIpcFrameKind::answer, flag_and_text(p.ok, p.ok ? std::string() : p.why));
}

CudaIpcSlots decode_cuda_ipc_slots(std::span<const std::byte> body, std::uint64_t max_bytes) {
  Reader r(body, "tensors");
  const std::size_t n = r.u8("n");
  if (n == 0 || n > kMaxWireTensors) {
    r.fail("n", fmt::format("{} outside [1, {}]", n, kMaxWireTensors));
  }
  CudaIpcSlots s;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t slot = r.u8("slot");
    if (slot >= kMaxWireTensors || (!s.slots.empty() && slot <= s.slots.back())) {
      r.fail("slot",
             fmt::format("{} is not above the previous one and below {}", slot, kMaxWireTensors));
    }
    s.slots.push_back(slot);
  }
  s.tensors = decode_cuda_ipc_tensors(r.take("descriptors", r.left()), max_bytes);
  if (s.tensors.size() != n) {
    r.fail("descriptors", fmt::format("{} for {} slots", s.tensors.size(), n));
  }
  return s;
}

std::uint64_t decode_cuda_ipc_ack(std::span<const std::byte> body) {
  Reader r(body, "ack");
  const std::uint64_t seq = r.u64("seq");
  r.end();
  return seq;
}

CudaIpcProbe decode_cuda_ipc_probe(std::span<const std::byte> body) {
  Reader r(body, "probe");
  CudaIpcProbe p;
  p.ok = flag(r);
  if (!p.ok) {
    p.why = text(r);
    return p;
  }
  const std::vector<CudaIpcTensor> ts = decode_cuda_ipc_tensors(r.take("probe", r.left()), 1024);
  if (ts.size() != 1) r.fail("probe", fmt::format("{} descriptors, expected 1", ts.size()));
  p.tensor = ts[0];
  return p;
}

CudaIpcProbe decode_cuda_ipc_answer(std::span<const std::byte> body) {
  Reader r(body, "answer");
  CudaIpcProbe p;
  p.ok = flag(r);
  p.why = text(r);
  if (p.ok && !p.why.empty()) r.fail("why", "a reason for a probe that worked");
  return p;
}

}  // namespace tandem::transport
