#include "transport/cuda_ipc_descriptor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>

#include "transport/byte_reader.hpp"
#include "transport/wire_message.hpp"

namespace tandem::transport {
namespace {

class Reader final : public ByteReader {
 public:
  using ByteReader::ByteReader;
  [[noreturn]] void fail(std::string_view field, const std::string& why) const override {
    throw WireError(fmt::format("cuda-ipc tensor descriptor, field '{}': {}", field, why));
  }
};

void put(std::vector<std::byte>& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

// numel * dtype size of `shape`, or nothing when it overflows `limit`.
bool shape_bytes(const Shape& shape, DType dtype, std::uint64_t limit, std::uint64_t* out) {
  std::uint64_t n = dtype_size(dtype);
  for (const std::int64_t d : shape) {
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > limit / u) return false;
    n *= u;
  }
  *out = n;
  return n <= limit;
}

// The checks both sides make; `fail(field, why)` reports the first that fails.
template <class Fail>
void check(const CudaIpcTensor& t, std::uint64_t max_bytes, const Fail& fail) {
  if (t.shape.size() > static_cast<std::size_t>(kMaxWireRank)) {
    fail("rank", fmt::format("{} exceeds {}", t.shape.size(), kMaxWireRank));
  }
  if (std::any_of(t.shape.begin(), t.shape.end(), [](std::int64_t d) { return d < 0; })) {
    fail("dims", "a dimension is negative");
  }
  if (t.device < 0 || t.device > std::numeric_limits<std::uint16_t>::max()) {
    fail("device", fmt::format("cuda:{} is not a device index", t.device));
  }
  std::uint64_t expect = 0;
  if (!shape_bytes(t.shape, t.dtype, max_bytes, &expect)) {
    fail("dims", fmt::format("{} exceeds the limit of {} bytes", dtype_name(t.dtype), max_bytes));
  }
  if (t.bytes != expect) {
    fail("bytes", fmt::format("{}, but {} of {} elements holds {}", t.bytes, dtype_name(t.dtype),
                              expect / dtype_size(t.dtype), expect));
  }
  if (t.offset > t.segment_bytes || t.bytes > t.segment_bytes - t.offset) {
    fail("offset", fmt::format("{} bytes at offset {} lie outside a segment of {} bytes", t.bytes,
                               t.offset, t.segment_bytes));
  }
  if (t.bytes > 0 && std::all_of(t.memory.begin(), t.memory.end(),
                                 [](std::byte b) { return b == std::byte{0}; })) {
    fail("memory handle", "all zeros (no allocation was named)");
  }
}

CudaIpcTensor read_one(Reader& r, std::uint64_t max_bytes) {
  CudaIpcTensor t;
  const std::uint8_t dtype = r.u8("dtype");
  if (dtype > static_cast<std::uint8_t>(DType::i32)) {
    r.fail("dtype", fmt::format("{} is not a dtype", dtype));
  }
  t.dtype = static_cast<DType>(dtype);
  const std::uint8_t rank = r.u8("rank");
  if (rank > kMaxWireRank) r.fail("rank", fmt::format("{} exceeds {}", rank, kMaxWireRank));
  t.device = r.u16("device");
  if (r.u32("padding") != 0) r.fail("padding", "not zero");
  for (std::uint8_t i = 0; i < rank; ++i) {
    t.shape.push_back(static_cast<std::int64_t>(r.u64("dims")));
  }
  t.seq = r.u64("seq");
  t.segment_bytes = r.u64("segment bytes");
  t.offset = r.u64("offset");
  t.bytes = r.u64("bytes");
  r.raw("memory handle", t.memory.data(), t.memory.size());
  r.raw("event handle", t.event.data(), t.event.size());
  check(t, max_bytes, [&r](std::string_view field, const std::string& why) { r.fail(field, why); });
  return t;
}

}  // namespace

std::vector<std::byte> encode_cuda_ipc_tensors(std::span<const CudaIpcTensor> tensors) {
  if (tensors.size() > kMaxWireTensors) {
    throw WireError(fmt::format("cuda-ipc tensor descriptors: {} tensors, above {}", tensors.size(),
                                kMaxWireTensors));
  }
  std::vector<std::byte> out;
  put(out, tensors.size(), 1);
  for (const CudaIpcTensor& t : tensors) {
    check(t, std::numeric_limits<std::uint64_t>::max(),
          [](std::string_view field, const std::string& why) {
            throw WireError(fmt::format("cuda-ipc tensor descriptor, field '{}': cannot encode: {}",
                                        field, why));
          });
    put(out, static_cast<std::uint8_t>(t.dtype), 1);
    put(out, t.shape.size(), 1);
    put(out, static_cast<std::uint64_t>(t.device), 2);
    put(out, 0, 4);
    for (const std::int64_t d : t.shape) put(out, static_cast<std::uint64_t>(d), 8);
    put(out, t.seq, 8);
    put(out, t.segment_bytes, 8);
    put(out, t.offset, 8);
    put(out, t.bytes, 8);
    out.insert(out.end(), t.memory.begin(), t.memory.end());
    out.insert(out.end(), t.event.begin(), t.event.end());
  }
  return out;
}

std::vector<CudaIpcTensor> decode_cuda_ipc_tensors(std::span<const std::byte> in,
                                                   std::uint64_t max_bytes) {
  Reader r(in);
  const std::uint8_t count = r.u8("count");
  if (count > kMaxWireTensors) {
    r.fail("count", fmt::format("{} tensors, above {}", count, kMaxWireTensors));
  }
  std::vector<CudaIpcTensor> out;
  out.reserve(count);
  for (std::uint8_t i = 0; i < count; ++i) out.push_back(read_one(r, max_bytes));
  if (r.left() != 0)
    r.fail("count", fmt::format("{} trailing bytes after the last tensor", r.left()));
  return out;
}

}  // namespace tandem::transport
