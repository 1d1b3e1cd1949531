#pragma once
// What the data-plane tests share: tensors with recognizable contents, exact comparison of a
// message as sent and as received, tags, and a tcp data-plane handshake played by hand.
#include <gtest/gtest.h>

#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/dtype.hpp"
#include "runtime/message.hpp"
#include "runtime/tensor.hpp"
#include "test_credentials.hpp"
#include "transport/job_proof.hpp"
#include "transport/wire_message.hpp"

namespace tandem::transport::testing {

inline Tensor f32_tensor(Shape shape, float base) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + 0.25f * i;
  return t;
}

inline Tensor i32_tensor(Shape shape, std::int32_t base) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<std::int32_t>()[i] = base - 3 * i;
  return t;
}

inline Tensor bf16_tensor(Shape shape, float base) {
  Tensor t = Tensor::empty(std::move(shape), DType::bf16);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<BFloat16>()[i] = BFloat16::from_float(base - 0.5f * i);
  }
  return t;
}

inline std::vector<std::byte> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::byte*>(t.raw_data());
  return {p, p + t.nbytes()};
}

inline void expect_same_message(const Message& got, const Message& sent) {
  EXPECT_EQ(got.env.type, sent.env.type);
  EXPECT_EQ(got.env.lane, sent.env.lane);
  EXPECT_EQ(got.env.flags, sent.env.flags);
  EXPECT_EQ(got.env.tag, sent.env.tag);
  EXPECT_EQ(std::memcmp(got.env.body, sent.env.body, kEnvelopeBodyBytes), 0);
  ASSERT_EQ(got.tensors.size(), sent.tensors.size());
  for (std::size_t i = 0; i < sent.tensors.size(); ++i) {
    const Tensor& a = got.tensors[i];
    const Tensor& b = sent.tensors[i];
    ASSERT_EQ(a.defined(), b.defined()) << "tensor " << i;
    if (!b.defined()) continue;
    EXPECT_EQ(a.describe(), b.describe()) << "tensor " << i;
    if (b.device().is_cpu()) {
      EXPECT_EQ(bytes_of(a), bytes_of(b)) << "tensor " << i;
      EXPECT_FALSE(a.shares_storage(b));
    }
  }
}

inline Tag tag_of(std::int64_t minibatch, int begin, int end, int kind, int chunk = 0) {
  Tag t;
  t.minibatch = minibatch;
  t.begin = begin;
  t.end = end;
  t.kind = static_cast<std::uint8_t>(kind);
  t.chunk = static_cast<std::uint8_t>(chunk);
  t.aux = 0xbeef;
  return t;
}

// `from`'s tcp data-plane proof to `to` on `lane`, over `mine` (its nonce) and `theirs`
// (`purpose`: kDataCudaIpc for the cuda-ipc channel, which shakes hands as tcp does).
inline WireProof tcp_proof(const JobCredentials& c, std::uint32_t from, std::uint32_t to,
                           std::uint16_t lane, const JobNonce& mine, const JobNonce& theirs,
                           ProofPurpose purpose = ProofPurpose::kDataTcp) {
  return {mine, make_proof(c.token, {purpose, c.job, from, to, lane, mine, theirs})};
}

// Reads one whole handshake frame (prefix and meta part) of `meta_bytes`.
inline std::vector<std::byte> read_handshake_frame(asio::ip::tcp::socket& s,
                                                   std::size_t meta_bytes) {
  std::vector<std::byte> frame(kWirePrefixBytes + meta_bytes);
  asio::read(s, asio::buffer(frame));
  return frame;
}

// Plays the connecting side of a tcp data-plane handshake as `rank` (lane `lane` of `lanes`)
// on a connected blocking socket, with `c`: hello, the listener's hello, proof, the listener's
// proof (expected to check). Returns the listener's hello.
inline WireHello tcp_client_handshake(asio::ip::tcp::socket& s, const JobCredentials& c,
                                      std::uint32_t rank, std::uint32_t peer_rank,
                                      std::uint16_t lane = 0, std::uint16_t lanes = 1,
                                      ProofPurpose purpose = ProofPurpose::kDataTcp) {
  const JobNonce mine = fresh_nonce();
  asio::write(s, asio::buffer(encode_wire_hello({job_id_of(c.job), rank, lane, lanes, mine})));
  const auto hello = read_handshake_frame(s, kWireHelloMetaBytes);
  const WireHello theirs = decode_wire_hello(std::span(hello).subspan(kWirePrefixBytes));
  EXPECT_EQ(theirs.rank, peer_rank);
  asio::write(s, asio::buffer(encode_wire_proof(
                     tcp_proof(c, rank, peer_rank, lane, mine, theirs.nonce, purpose))));
  const auto proof = read_handshake_frame(s, kWireProofMetaBytes);
  const WireProof got = decode_wire_proof(std::span(proof).subspan(kWirePrefixBytes));
  EXPECT_EQ(got.nonce, theirs.nonce);
  EXPECT_TRUE(
      check_proof(c.token, {purpose, c.job, peer_rank, rank, lane, theirs.nonce, mine}, got.proof));
  return theirs;
}

}  // namespace tandem::transport::testing
