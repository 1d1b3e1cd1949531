// Which data plane cluster.transport means, and which peers of a cuda-ipc data plane fall back
// to host staging, said once.
#include "transport/cuda_ipc_fallback.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "transport/cuda_ipc_choice.hpp"

namespace tandem::transport {
namespace {

TEST(DataPlaneChoice, AutoPicksCudaIpcOnlyWhereItServesTheWholeJob) {
  const DataPlaneFacts all{true, true, true};
  EXPECT_EQ(choose_data_plane("auto", all), DataPlane::cuda_ipc);
  EXPECT_EQ(choose_data_plane("auto", {false, true, true}), DataPlane::tcp);  // no CUDA built
  EXPECT_EQ(choose_data_plane("auto", {true, false, true}), DataPlane::tcp);  // several hosts
  EXPECT_EQ(choose_data_plane("auto", {true, true, false}), DataPlane::tcp);  // a host stage
}

TEST(DataPlaneChoice, ExplicitChoicesAreKept) {
  EXPECT_EQ(choose_data_plane("tcp", {true, true, true}), DataPlane::tcp);
  EXPECT_EQ(choose_data_plane("ucx", {true, true, true}), DataPlane::ucx);
  EXPECT_EQ(choose_data_plane("cuda-ipc", {true, false, false}), DataPlane::cuda_ipc);
  EXPECT_EQ(data_plane_name(DataPlane::cuda_ipc), "cuda-ipc");
}

TEST(DataPlaneChoice, RefusesCudaIpcWithoutCudaAndUnknownNames) {
  try {
    choose_data_plane("cuda-ipc", {false, true, true});
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA backend"), std::string::npos);
  }
  EXPECT_THROW(choose_data_plane("ipc", {true, true, true}), std::invalid_argument);
}

struct Warnings {
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& l) { lines.push_back(l); };
  }
};

TEST(CudaIpcFallback, PeersOnThisHostStartOnIpc) {
  Warnings w;
  CudaIpcFallback f(0, w.sink());
  f.add_peer(1, true);
  EXPECT_EQ(f.route(1), CudaIpcRoute::ipc);
  EXPECT_TRUE(w.lines.empty());
  EXPECT_THROW(f.route(7), std::out_of_range);
}

TEST(CudaIpcFallback, ARefusalMovesThatPeerToStagingAndIsSaidOnce) {
  Warnings w;
  CudaIpcFallback f(2, w.sink());
  f.add_peer(0, true);
  f.add_peer(1, true);
  EXPECT_TRUE(f.refuse(1, "cudaIpcGetMemHandle failed: operation not supported"));
  EXPECT_FALSE(f.refuse(1, "again"));
  EXPECT_TRUE(f.refuse(0, "cudaIpcOpenMemHandle failed"));
  EXPECT_EQ(f.route(0), CudaIpcRoute::staging);
  EXPECT_EQ(f.route(1), CudaIpcRoute::staging);
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_NE(w.lines[0].find("rank 2"), std::string::npos);
  EXPECT_NE(w.lines[0].find("rank 1: cudaIpcGetMemHandle failed"), std::string::npos);
  ASSERT_EQ(f.refusals().size(), 2u);
  EXPECT_EQ(f.refusals()[1].peer_rank, 0);
}

TEST(CudaIpcFallback, APeerOnAnotherHostIsStagedFromTheStart) {
  Warnings w;
  CudaIpcFallback f(0, w.sink());
  f.add_peer(3, false);
  EXPECT_EQ(f.route(3), CudaIpcRoute::staging);
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_NE(w.lines[0].find("another host"), std::string::npos);
  EXPECT_THROW(f.refuse(9, "x"), std::out_of_range);
}

}  // namespace
}  // namespace tandem::transport
