// The cuda-ipc data plane's tensor descriptors: what a sender writes decodes to the same
// descriptors, and bytes from another process are refused field by field before use.
#include "transport/cuda_ipc_descriptor.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "transport/wire_message.hpp"

namespace tandem::transport {
namespace {

constexpr std::uint64_t kLimit = std::uint64_t{1} << 30;

CudaIpcTensor sample() {
  CudaIpcTensor t;
  t.dtype = DType::bf16;
  t.shape = {3, 5};
  t.device = 1;
  t.seq = 77;
  t.segment_bytes = 4096;
  t.offset = 512;
  t.bytes = 3 * 5 * 2;
  for (std::size_t i = 0; i < kCudaIpcHandleBytes; ++i) {
    t.memory[i] = static_cast<std::byte>(i + 1);
    t.event[i] = static_cast<std::byte>(200 - i);
  }
  return t;
}

// Offsets of fields in the first record (after the u8 count): dtype 1, rank 2, device 3,
// padding 5, dims 9.. then seq, segment bytes, offset, bytes, handles.
std::size_t after_dims(const CudaIpcTensor& t) {
  return 9 + 8 * t.shape.size();
}

void put_u64(std::vector<std::byte>& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i)
    b[at + static_cast<std::size_t>(i)] = std::byte((v >> (8 * i)) & 0xff);
}

std::string refusal(const std::vector<std::byte>& bytes, std::uint64_t limit = kLimit) {
  try {
    decode_cuda_ipc_tensors(bytes, limit);
  } catch (const WireError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(CudaIpcDescriptor, RoundTripsEveryField) {
  CudaIpcTensor scalar;
  scalar.dtype = DType::i32;
  scalar.bytes = 4;
  scalar.segment_bytes = 4;
  scalar.memory[3] = std::byte{9};
  CudaIpcTensor empty;  // no elements: no handle needed
  empty.shape = {0, 4};
  const std::vector<CudaIpcTensor> in{sample(), scalar, empty};
  const std::vector<std::byte> bytes = encode_cuda_ipc_tensors(in);
  EXPECT_EQ(decode_cuda_ipc_tensors(bytes, kLimit), in);
}

TEST(CudaIpcDescriptor, NoTensorsIsOneByte) {
  const std::vector<std::byte> bytes = encode_cuda_ipc_tensors({});
  EXPECT_EQ(bytes.size(), 1u);
  EXPECT_TRUE(decode_cuda_ipc_tensors(bytes, kLimit).empty());
}

TEST(CudaIpcDescriptor, EveryTruncationIsRefused) {
  const std::vector<CudaIpcTensor> in{sample()};
  const std::vector<std::byte> bytes = encode_cuda_ipc_tensors(in);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    EXPECT_NE(refusal(cut).find("truncated"), std::string::npos) << n << " bytes";
  }
}

TEST(CudaIpcDescriptor, TrailingBytesAreRefused) {
  std::vector<std::byte> bytes = encode_cuda_ipc_tensors(std::vector{sample()});
  bytes.push_back(std::byte{0});
  EXPECT_NE(refusal(bytes).find("trailing"), std::string::npos);
}

TEST(CudaIpcDescriptor, FieldsFromOutsideAreChecked) {
  const CudaIpcTensor t = sample();
  const std::vector<std::byte> good = encode_cuda_ipc_tensors(std::vector{t});
  const std::size_t seq = after_dims(t);
  const std::size_t segment = seq + 8, offset = seq + 16, bytes = seq + 24, memory = seq + 32;
  struct Case {
    const char* name;
    std::function<void(std::vector<std::byte>&)> spoil;
    const char* field;
  };
  const std::vector<Case> cases{
      {"count above the tensors a frame holds", [](auto& b) { b[0] = std::byte{200}; }, "count"},
      {"unknown dtype", [](auto& b) { b[1] = std::byte{9}; }, "dtype"},
      {"rank above the wire's", [](auto& b) { b[2] = std::byte{kMaxWireRank + 1}; }, "rank"},
      {"nonzero padding", [](auto& b) { b[5] = std::byte{1}; }, "padding"},
      {"negative dim", [](auto& b) { put_u64(b, 9, std::uint64_t(-3)); }, "dims"},
      {"dims beyond the limit", [](auto& b) { put_u64(b, 9, std::uint64_t{1} << 40); }, "dims"},
      {"bytes that do not match the shape", [&](auto& b) { put_u64(b, bytes, 31); }, "bytes"},
      {"tensor past its segment", [&](auto& b) { put_u64(b, offset, 4096 - 29); }, "offset"},
      {"offset past its segment", [&](auto& b) { put_u64(b, offset, 5000); }, "offset"},
      {"offset + bytes overflowing", [&](auto& b) { put_u64(b, offset, ~std::uint64_t{0} - 4); },
       "offset"},
      {"empty segment", [&](auto& b) { put_u64(b, segment, 0); }, "offset"},
      {"all-zero memory handle",
       [&](auto& b) {
         for (std::size_t i = 0; i < kCudaIpcHandleBytes; ++i) b[memory + i] = std::byte{0};
       },
       "memory handle"},
  };
  ASSERT_EQ(refusal(good), "accepted");
  for (const Case& c : cases) {
    std::vector<std::byte> spoilt = good;
    c.spoil(spoilt);
    const std::string why = refusal(spoilt);
    EXPECT_NE(why.find(std::string("field '") + c.field + "'"), std::string::npos)
        << c.name << ": " << why;
  }
}

TEST(CudaIpcDescriptor, TheLimitBoundsATensor) {
  const std::vector<std::byte> bytes = encode_cuda_ipc_tensors(std::vector{sample()});
  EXPECT_EQ(refusal(bytes, 30), "accepted");
  EXPECT_NE(refusal(bytes, 29).find("limit of 29 bytes"), std::string::npos);
}

TEST(CudaIpcDescriptor, TheSenderRefusesWhatWouldNotDecode) {
  CudaIpcTensor outside = sample();
  outside.offset = 4090;
  EXPECT_THROW(encode_cuda_ipc_tensors(std::vector{outside}), WireError);
  CudaIpcTensor wrong = sample();
  wrong.bytes = 1;
  EXPECT_THROW(encode_cuda_ipc_tensors(std::vector{wrong}), WireError);
  CudaIpcTensor deep = sample();
  deep.shape.assign(kMaxWireRank + 1, 1);
  deep.bytes = 2;
  EXPECT_THROW(encode_cuda_ipc_tensors(std::vector{deep}), WireError);
  const std::vector<CudaIpcTensor> many(kMaxWireTensors + 1, sample());
  EXPECT_THROW(encode_cuda_ipc_tensors(many), WireError);
}

}  // namespace
}  // namespace tandem::transport
