// The sender's messages awaiting the receiver's acknowledgement: their tensors stay alive until
// it comes, and acknowledgements from outside that name nothing held are refused.
#include "transport/cuda_ipc_outstanding.hpp"

#include <gtest/gtest.h>

#include <string>

#include "transport/wire_message.hpp"

namespace tandem::transport {
namespace {

Message with_tensor(const Tensor& t) {
  Message m;
  m.tensors.push_back(t);
  return m;
}

TEST(CudaIpcOutstanding, KeepsTheTensorsAliveUntilAcknowledged) {
  CudaIpcOutstanding out;
  Tensor a = Tensor::zeros({4, 4});
  Tensor b = Tensor::zeros({2});
  const std::uint64_t first = out.hold(with_tensor(a), {});
  const std::uint64_t second = out.hold(with_tensor(b), {});
  EXPECT_EQ(first, 1u);
  EXPECT_EQ(second, 2u);
  EXPECT_FALSE(a.storage_unique());
  EXPECT_EQ(out.held(), 2u);
  EXPECT_EQ(out.held_bytes(), 4u * 4 * 4 + 2 * 4);
  out.acknowledge(second);  // out of order: each message on its own
  EXPECT_TRUE(b.storage_unique());
  EXPECT_FALSE(a.storage_unique());
  out.acknowledge(first);
  EXPECT_TRUE(a.storage_unique());
  EXPECT_EQ(out.held(), 0u);
  EXPECT_EQ(out.held_bytes(), 0u);
}

TEST(CudaIpcOutstanding, RefusesAcknowledgementsOfNothingHeld) {
  CudaIpcOutstanding out;
  const std::uint64_t seq = out.hold(with_tensor(Tensor::zeros({1})), {});
  EXPECT_THROW(out.acknowledge(seq + 1), WireError);  // never sent
  EXPECT_THROW(out.acknowledge(0), WireError);
  out.acknowledge(seq);
  try {
    out.acknowledge(seq);  // twice
    FAIL() << "accepted";
  } catch (const WireError& e) {
    EXPECT_NE(std::string(e.what()).find("message 1: not awaiting one"), std::string::npos);
  }
}

TEST(CudaIpcOutstanding, ReleaseAllDropsWhatAGonePeerWillNeverAcknowledge) {
  CudaIpcOutstanding out;
  Tensor a = Tensor::zeros({3});
  out.hold(with_tensor(a), {});
  out.hold(Message{}, {});
  EXPECT_EQ(out.release_all(), 2u);
  EXPECT_TRUE(a.storage_unique());
  EXPECT_EQ(out.held_bytes(), 0u);
  EXPECT_EQ(out.hold(Message{}, {}), 3u);  // seqs are never reused
}

}  // namespace
}  // namespace tandem::transport
