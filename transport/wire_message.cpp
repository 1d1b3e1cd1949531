#include "transport/wire_message.hpp"

#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "transport/byte_reader.hpp"

namespace tandem::transport {
namespace {

constexpr std::size_t kMessageFixedMeta = 44;  // the meta part before the body
// Elements of any tensor, data or not: far below where numel * dtype size could overflow.
constexpr std::uint64_t kMaxWireNumel = std::uint64_t{1} << 48;

class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
  void u16(std::uint16_t v) { put(v, 2); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void raw(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::vector<std::byte>& out() { return out_; }
  // Writes the prefix's meta size, once the meta part is complete.
  void patch_meta_size() {
    const std::size_t meta = out_.size() - kWirePrefixBytes;
    out_[6] = static_cast<std::byte>(meta & 0xff);
    out_[7] = static_cast<std::byte>((meta >> 8) & 0xff);
  }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  }
  std::vector<std::byte> out_;
};

void write_prefix(Writer& w, std::uint32_t magic, std::uint16_t meta, std::uint64_t data) {
  w.u32(magic);
  w.u16(kWireVersion);
  w.u16(meta);
  w.u64(data);
}

// A meta part. Errors are WireErrors naming the frame, then (once known) the message, then the
// field.
class Reader final : public ByteReader {
 public:
  Reader(std::span<const std::byte> in, std::string_view context)
      : ByteReader(in), context_(context) {}

  std::int32_t i32(std::string_view field) { return static_cast<std::int32_t>(u32(field)); }
  std::int64_t i64(std::string_view field) { return static_cast<std::int64_t>(u64(field)); }
  // From now on errors name this message (described only when one is thrown: naming a type
  // takes the registry's lock).
  void set_head(const WireHead* head) { head_ = head; }
  // `last`: the field the part ends with, named when bytes follow it.
  void finish(std::string_view last = {}) {
    if (left() == 0) return;
    if (!last.empty()) fail(last, fmt::format("{} trailing bytes after it", left()));
    throw WireError(fmt::format("{}: {} trailing bytes after the last field", context(), left()));
  }
  [[noreturn]] void fail(std::string_view field, const std::string& why) const override {
    throw WireError(fmt::format("{}, field '{}': {}", context(), field, why));
  }

 private:
  std::string context() const {
    return head_ != nullptr ? "data frame " + describe_wire_head(*head_) : std::string(context_);
  }

  std::string_view context_;
  const WireHead* head_ = nullptr;
};

bool known_dtype(std::uint8_t d) {
  return d <= static_cast<std::uint8_t>(DType::i32);
}

std::string lane_name(Lane lane) {
  switch (lane) {
    case Lane::control:
      return "control";
    case Lane::forward:
      return "forward";
    case Lane::backward:
      return "backward";
  }
  return fmt::format("<lane {}>", static_cast<int>(lane));
}

// numel * dtype size of `shape`, or false when it overflows `limit`.
bool shape_bytes(const Shape& shape, std::size_t elem, std::uint64_t limit, std::uint64_t* out) {
  std::uint64_t n = elem;
  for (const std::int64_t d : shape) {
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > limit / u) return false;
    n *= u;
  }
  *out = n;
  return n <= limit;
}

}  // namespace

void WireTypes::add(std::uint32_t id, Info info) {
  auto [it, added] = types_.try_emplace(id, info);
  if (!added && (it->second.name != info.name || it->second.body_bytes != info.body_bytes ||
                 it->second.lane != info.lane)) {
    throw std::logic_error(fmt::format("wire types: '{}' and '{}' share the id {:#x}",
                                       it->second.name, info.name, id));
  }
}

const WireTypes::Info* WireTypes::find(std::uint32_t id) const {
  auto it = types_.find(id);
  return it == types_.end() ? nullptr : &it->second;
}

std::string describe_wire_head(const WireHead& h) {
  const Tag& t = h.env.tag;
  return fmt::format("'{}' from endpoint {} to {}, minibatch {} samples [{}, {}) kind {} chunk {}",
                     message_type_name(h.env.type), h.from, h.to, t.minibatch, t.begin, t.end,
                     t.kind, t.chunk);
}

std::vector<std::byte> encode_wire_head(std::uint64_t job, Endpoint from, Endpoint to,
                                        const Message& msg, const WireTypes& types,
                                        std::uint64_t max_data_bytes) {
  WireHead h;
  h.from = from;
  h.to = to;
  h.env = msg.env;
  // Described only for an error: naming a type takes the registry's lock.
  const auto context = [&h] { return "encoding data frame " + describe_wire_head(h); };
  if (from < 0 || to < 0) throw WireError(context() + ": negative endpoint");
  const WireTypes::Info* info = types.find(msg.env.type);
  if (info == nullptr) {
    throw WireError(context() + ": the type is not one the data plane carries (WireTypes)");
  }
  if (info->lane != msg.env.lane) {
    throw WireError(fmt::format("{}: lane {}, but the type travels on lane {}", context(),
                                lane_name(msg.env.lane), lane_name(info->lane)));
  }
  if (msg.tensors.size() > kMaxWireTensors) {
    throw WireError(fmt::format("{}: {} tensors, more than the limit of {}", context(),
                                msg.tensors.size(), kMaxWireTensors));
  }
  Writer w;
  write_prefix(w, kWireMessageMagic, 0, 0);
  w.u64(job);
  w.u32(static_cast<std::uint32_t>(from));
  w.u32(static_cast<std::uint32_t>(to));
  w.u32(msg.env.type);
  w.u8(static_cast<std::uint8_t>(msg.env.lane));
  w.u8(msg.env.flags);
  w.u8(info->body_bytes);
  w.u8(static_cast<std::uint8_t>(msg.tensors.size()));
  const Tag& t = msg.env.tag;
  w.u64(static_cast<std::uint64_t>(t.minibatch));
  w.u32(static_cast<std::uint32_t>(t.begin));
  w.u32(static_cast<std::uint32_t>(t.end));
  w.u8(t.kind);
  w.u8(t.chunk);
  w.u16(t.aux);
  w.raw(std::span(msg.env.body, info->body_bytes));
  std::uint64_t data = 0;
  for (std::size_t i = 0; i < msg.tensors.size(); ++i) {
    const Tensor& x = msg.tensors[i];
    WireStorage storage = WireStorage::undefined;
    if (x.defined()) {
      if (x.device().is_sim()) {
        storage = WireStorage::sim;
      } else if (x.device().is_cpu()) {
        storage = WireStorage::data;
      } else {
        throw WireError(fmt::format("{}: tensor {} is {}; copy it to the host first", context(), i,
                                    x.describe()));
      }
    }
    if (x.rank() > kMaxWireRank) {
      throw WireError(fmt::format("{}: tensor {} is {}, of rank above the limit of {}", context(),
                                  i, x.describe(), kMaxWireRank));
    }
    const std::uint64_t bytes = storage == WireStorage::undefined ? 0 : x.nbytes();
    if (bytes > max_data_bytes - data) {
      throw WireError(
          fmt::format("{}: the tensors exceed the limit of {} bytes", context(), max_data_bytes));
    }
    data += bytes;
    w.u8(static_cast<std::uint8_t>(storage));
    w.u8(static_cast<std::uint8_t>(x.dtype()));
    w.u8(static_cast<std::uint8_t>(x.rank()));
    w.u8(0);
    for (const std::int64_t d : x.shape()) w.u64(static_cast<std::uint64_t>(d));
    w.u64(bytes);
  }
  w.patch_meta_size();
  auto& out = w.out();
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<std::byte>((data >> (8 * i)) & 0xff);
  return std::move(out);
}

namespace {

// What a sim tensor's bytes are written from and read into: it has none, but it costs a link
// what its data would. Read-only zeros to send; per thread, a scratch buffer whose contents
// nobody reads.
constexpr std::size_t kSimBlockBytes = std::size_t{1} << 20;

template <class Span, class Byte>
void add_blocks(std::vector<Span>& out, Byte* block, std::size_t bytes) {
  for (std::size_t left = bytes; left > 0;) {
    const std::size_t n = std::min(left, kSimBlockBytes);
    out.emplace_back(block, n);
    left -= n;
  }
}

}  // namespace

std::vector<std::span<const std::byte>> wire_payload(const Message& msg) {
  static const std::vector<std::byte> zeros(kSimBlockBytes);
  std::vector<std::span<const std::byte>> out;
  for (const Tensor& x : msg.tensors) {
    if (!x.defined() || x.nbytes() == 0) continue;
    if (x.device().is_sim()) {
      add_blocks(out, zeros.data(), x.nbytes());
    } else if (x.device().is_cpu()) {
      out.emplace_back(static_cast<const std::byte*>(x.raw_data()), x.nbytes());
    }
  }
  return out;
}

std::vector<std::byte> encode_wire_message(std::uint64_t job, Endpoint from, Endpoint to,
                                           const Message& msg, const WireTypes& types) {
  std::vector<std::byte> out = encode_wire_head(job, from, to, msg, types);
  for (const auto part : wire_payload(msg)) out.insert(out.end(), part.begin(), part.end());
  return out;
}

std::vector<std::byte> encode_wire_hello(const WireHello& hello) {
  Writer w;
  write_prefix(w, kWireHelloMagic, kWireHelloMetaBytes, 0);
  w.u64(hello.job);
  w.u32(hello.rank);
  w.u16(hello.lane);
  w.u16(hello.lanes);
  w.raw(std::as_bytes(std::span(hello.nonce)));
  return std::move(w.out());
}

std::vector<std::byte> encode_wire_proof(const WireProof& proof) {
  Writer w;
  write_prefix(w, kWireProofMagic, kWireProofMetaBytes, 0);
  w.raw(std::as_bytes(std::span(proof.nonce)));
  w.raw(std::as_bytes(std::span(proof.proof)));
  return std::move(w.out());
}

std::vector<std::byte> encode_wire_goodbye() {
  Writer w;
  write_prefix(w, kWireGoodbyeMagic, 0, 0);
  return std::move(w.out());
}

WirePrefix decode_wire_prefix(std::span<const std::byte> bytes) {
  if (bytes.size() != kWirePrefixBytes) {
    throw WireError(
        fmt::format("data frame prefix: {} bytes, not {}", bytes.size(), kWirePrefixBytes));
  }
  Reader r(bytes, "data frame prefix");
  const std::uint32_t magic = r.u32("magic");
  const std::uint16_t version = r.u16("version");
  WirePrefix p;
  p.meta_bytes = r.u16("meta bytes");
  p.data_bytes = r.u64("data bytes");
  if (magic == kWireMessageMagic) {
    p.kind = WireFrameKind::message;
  } else if (magic == kWireHelloMagic) {
    p.kind = WireFrameKind::hello;
  } else if (magic == kWireGoodbyeMagic) {
    p.kind = WireFrameKind::goodbye;
  } else if (magic == kWireProofMagic) {
    p.kind = WireFrameKind::proof;
  } else {
    r.fail("magic", fmt::format("{:#010x} is not a Tandem data frame", magic));
  }
  if (version != kWireVersion) {
    r.fail("version", fmt::format("{}, this process speaks {}", version, kWireVersion));
  }
  switch (p.kind) {
    case WireFrameKind::message:
      if (p.meta_bytes < kMessageFixedMeta || p.meta_bytes > kMaxWireMetaBytes) {
        r.fail("meta bytes", fmt::format("{} for a message, outside [{}, {}]", p.meta_bytes,
                                         kMessageFixedMeta, kMaxWireMetaBytes));
      }
      break;
    case WireFrameKind::hello:
      if (p.meta_bytes != kWireHelloMetaBytes || p.data_bytes != 0) {
        r.fail("meta bytes", fmt::format("{} meta and {} data bytes for a hello, not {} and 0",
                                         p.meta_bytes, p.data_bytes, kWireHelloMetaBytes));
      }
      break;
    case WireFrameKind::proof:
      if (p.meta_bytes != kWireProofMetaBytes || p.data_bytes != 0) {
        r.fail("meta bytes", fmt::format("{} meta and {} data bytes for a proof, not {} and 0",
                                         p.meta_bytes, p.data_bytes, kWireProofMetaBytes));
      }
      break;
    case WireFrameKind::goodbye:
      if (p.meta_bytes != 0 || p.data_bytes != 0) {
        r.fail("meta bytes", fmt::format("{} meta and {} data bytes for a goodbye, not 0 and 0",
                                         p.meta_bytes, p.data_bytes));
      }
      break;
  }
  return p;
}

WireHead decode_wire_head(std::span<const std::byte> meta, std::uint64_t data_bytes,
                          const WireRules& rules) {
  if (rules.types == nullptr) throw std::invalid_argument("decode_wire_head: no WireTypes");
  Reader r(meta, "data frame");
  WireHead h;
  h.job = r.u64("job");
  const std::uint32_t from = r.u32("from");
  const std::uint32_t to = r.u32("to");
  constexpr auto kMaxEndpoint = static_cast<std::uint32_t>(std::numeric_limits<Endpoint>::max());
  if (from > kMaxEndpoint) r.fail("from", fmt::format("endpoint {} out of range", from));
  if (to > kMaxEndpoint) r.fail("to", fmt::format("endpoint {} out of range", to));
  h.from = static_cast<Endpoint>(from);
  h.to = static_cast<Endpoint>(to);
  h.env.type = r.u32("type");
  const std::uint8_t lane = r.u8("lane");
  h.env.flags = r.u8("flags");
  const std::uint8_t body_bytes = r.u8("body bytes");
  const std::uint8_t tensors = r.u8("tensors");
  h.env.tag.minibatch = r.i64("minibatch");
  h.env.tag.begin = r.i32("begin");
  h.env.tag.end = r.i32("end");
  h.env.tag.kind = r.u8("kind");
  h.env.tag.chunk = r.u8("chunk");
  h.env.tag.aux = r.u16("aux");
  // From here on every error names the message: its type and tag.
  r.set_head(&h);
  if (h.job != rules.job) {
    r.fail("job", fmt::format("{:#x}, but this job is {:#x}", h.job, rules.job));
  }
  const WireTypes::Info* info = rules.types->find(h.env.type);
  if (info == nullptr) r.fail("type", fmt::format("{:#x} is not a known type", h.env.type));
  if (lane >= kLaneCount) r.fail("lane", fmt::format("{} is not a lane", lane));
  h.env.lane = static_cast<Lane>(lane);
  if (h.env.lane != info->lane) {
    r.fail("lane", fmt::format("{}, but '{}' travels on lane {}", lane_name(h.env.lane), info->name,
                               lane_name(info->lane)));
  }
  if (body_bytes != info->body_bytes) {
    r.fail("body bytes",
           fmt::format("{}, but '{}' has {}", body_bytes, info->name, info->body_bytes));
  }
  r.raw("body", h.env.body, body_bytes);
  if (tensors > kMaxWireTensors) {
    r.fail("tensors", fmt::format("{}, more than the limit of {}", tensors, kMaxWireTensors));
  }
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < tensors; ++i) {
    const std::string field = fmt::format("tensor {}", i);
    WireTensorSpec s;
    const std::uint8_t storage = r.u8(field + " storage");
    const std::uint8_t dtype = r.u8(field + " dtype");
    const std::uint8_t rank = r.u8(field + " rank");
    if (r.u8(field + " padding") != 0) r.fail(field + " padding", "not zero");
    if (storage > static_cast<std::uint8_t>(WireStorage::sim)) {
      r.fail(field + " storage", fmt::format("{} is not a storage kind", storage));
    }
    s.storage = static_cast<WireStorage>(storage);
    if (!known_dtype(dtype)) r.fail(field + " dtype", fmt::format("{} is not a dtype", dtype));
    s.dtype = static_cast<DType>(dtype);
    if (rank > kMaxWireRank) {
      r.fail(field + " rank", fmt::format("{}, above the limit of {}", rank, kMaxWireRank));
    }
    if (s.storage == WireStorage::undefined && rank != 0) {
      r.fail(field + " rank", "an undefined tensor has no shape");
    }
    for (int d = 0; d < rank; ++d) {
      const std::int64_t dim = r.i64(field + " dims");
      if (dim < 0 || dim > std::numeric_limits<std::int32_t>::max()) {
        r.fail(field + " dims", fmt::format("dimension {} is {}", d, dim));
      }
      s.shape.push_back(dim);
    }
    s.bytes = r.u64(field + " bytes");
    std::uint64_t numel = 0;
    if (!shape_bytes(s.shape, 1, kMaxWireNumel, &numel)) {
      r.fail(field + " dims",
             fmt::format("{} has more than {} elements", shape_str(s.shape), kMaxWireNumel));
    }
    std::uint64_t expect = 0;
    if (s.storage != WireStorage::undefined &&
        !shape_bytes(s.shape, dtype_size(s.dtype), rules.max_data_bytes, &expect)) {
      r.fail(field + " dims", fmt::format("{}{} exceeds the limit of {} bytes", dtype_name(s.dtype),
                                          shape_str(s.shape), rules.max_data_bytes));
    }
    if (s.bytes != expect) {
      r.fail(field + " bytes",
             fmt::format("{}, but {}{} ({}) holds {}", s.bytes, dtype_name(s.dtype),
                         shape_str(s.shape), storage == 0 ? "no data" : "data", expect));
    }
    if (s.bytes > rules.max_data_bytes - total) {
      r.fail(field + " bytes",
             fmt::format("the tensors exceed the limit of {} bytes", rules.max_data_bytes));
    }
    total += s.bytes;
    h.tensors.push_back(std::move(s));
  }
  r.finish();
  if (total != data_bytes) {
    r.fail("data bytes",
           fmt::format("{} in the prefix, but the tensors hold {}", data_bytes, total));
  }
  return h;
}

WireHello decode_wire_hello(std::span<const std::byte> meta) {
  Reader r(meta, "data-plane hello");
  WireHello h;
  h.job = r.u64("job");
  h.rank = r.u32("rank");
  h.lane = r.u16("lane");
  h.lanes = r.u16("lanes");
  r.raw("nonce", reinterpret_cast<std::byte*>(h.nonce.data()), h.nonce.size());
  r.finish("nonce");
  if (h.lanes == 0 || h.lanes > kMaxWireLanes) {
    r.fail("lanes", fmt::format("{}, outside [1, {}]", h.lanes, kMaxWireLanes));
  }
  if (h.lane >= h.lanes) r.fail("lane", fmt::format("{} of {} lanes", h.lane, h.lanes));
  return h;
}

WireProof decode_wire_proof(std::span<const std::byte> meta) {
  Reader r(meta, "data-plane proof");
  WireProof p;
  r.raw("nonce", reinterpret_cast<std::byte*>(p.nonce.data()), p.nonce.size());
  r.raw("proof", reinterpret_cast<std::byte*>(p.proof.data()), p.proof.size());
  r.finish("proof");
  return p;
}

std::vector<Tensor> allocate_wire_tensors(const WireHead& head) {
  std::vector<Tensor> out;
  out.reserve(head.tensors.size());
  for (const WireTensorSpec& s : head.tensors) {
    switch (s.storage) {
      case WireStorage::undefined:
        out.emplace_back();
        break;
      case WireStorage::data:
        out.push_back(Tensor::empty(s.shape, s.dtype, Device::cpu()));
        break;
      case WireStorage::sim:
        out.push_back(Tensor::empty(s.shape, s.dtype, Device::sim()));
        break;
    }
  }
  return out;
}

std::vector<std::span<std::byte>> wire_receive_buffers(std::vector<Tensor>& tensors) {
  thread_local std::vector<std::byte> scratch;
  std::vector<std::span<std::byte>> out;
  for (Tensor& x : tensors) {
    if (!x.defined() || x.nbytes() == 0) continue;
    if (x.device().is_sim()) {
      scratch.resize(kSimBlockBytes);
      add_blocks(out, scratch.data(), x.nbytes());
    } else if (x.device().is_cpu()) {
      out.emplace_back(static_cast<std::byte*>(x.raw_data()), x.nbytes());
    }
  }
  return out;
}

WireMessage decode_wire_message(std::span<const std::byte> bytes, const WireRules& rules) {
  if (bytes.size() < kWirePrefixBytes) {
    throw WireError(fmt::format("data frame: {} bytes, shorter than the {}-byte prefix (truncated)",
                                bytes.size(), kWirePrefixBytes));
  }
  const WirePrefix p = decode_wire_prefix(bytes.first(kWirePrefixBytes));
  if (p.kind != WireFrameKind::message) throw WireError("data frame: not a message frame");
  const std::size_t after_prefix = bytes.size() - kWirePrefixBytes;
  if (after_prefix < p.meta_bytes || after_prefix - p.meta_bytes != p.data_bytes) {
    throw WireError(fmt::format(
        "data frame: {} bytes after the prefix, but it announces {} meta and {} data bytes",
        after_prefix, p.meta_bytes, p.data_bytes));
  }
  const WireHead head =
      decode_wire_head(bytes.subspan(kWirePrefixBytes, p.meta_bytes), p.data_bytes, rules);
  WireMessage out;
  out.from = head.from;
  out.to = head.to;
  out.msg.env = head.env;
  out.msg.tensors = allocate_wire_tensors(head);
  std::size_t pos = kWirePrefixBytes + p.meta_bytes;
  for (const auto buf : wire_receive_buffers(out.msg.tensors)) {
    std::memcpy(buf.data(), bytes.data() + pos, buf.size());
    pos += buf.size();
  }
  return out;
}

}  // namespace tandem::transport
