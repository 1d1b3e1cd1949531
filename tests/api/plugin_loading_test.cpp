// The CUDA and UCX back ends are plugins loaded on first use (runtime/plugin.hpp): a CPU-only
// service or run maps none of cudart, cuBLAS, NCCL, UCX or the plugins themselves, and the first
// question about cuda devices loads the CUDA ones (tests/transport/ucx_plugin_test.cpp: UCX's).
// Checked in this process's /proc/self/maps (each test runs in a process of its own under ctest;
// this executable links libtandem.so only, never the plugin).
#include <gtest/gtest.h>

#include <string>
#include <tandem/tandem.hpp>
#include <vector>

#include "../support/mapped_libraries.hpp"
#include "api_test_util.hpp"

namespace tandem {
namespace {

const std::vector<std::string> kCudaLibraries = {"libcudart", "libcublas", "libnccl",
                                                 "libtandem_cuda"};
// The ucx data plane's plugin and UCX itself: a run in one process asks for no data plane.
const std::vector<std::string> kBackEndLibraries = {
    "libcudart", "libcublas", "libnccl", "libtandem_cuda", "libucp", "libucs", "libtandem_ucx"};

using test_support::joined;
using test_support::mapped;

const std::string kCpuJob =
    "model: {name: mlp, widths: [8, 16, 16, 4]}\n"
    "data: {kind: teacher, samples: 256, seed: 1, hidden: 8}\n"
    "train: {minibatch: 16, steps: 4, optimizer: {kind: sgd, lr: 0.05}, seed: 2}\n"
    "pipeline:\n  schedule: 1f1b\n  slices: 2\n  stages:\n"
    "    - {layers: \"0-1\", device: cpu}\n    - {layers: \"2\", device: cpu}\n";

TEST(PluginLoading, ACpuRunFromAConfigMapsNoCudaOrUcxLibrary) {
  Session session(Config::text(kCpuJob, "cpu job"));
  const TrainResult r = session.run();
  ASSERT_EQ(r.losses.size(), 4u);
  const std::vector<std::string> back_ends = mapped(kBackEndLibraries);
  EXPECT_TRUE(back_ends.empty()) << "a CPU run mapped:\n" << joined(back_ends);
}

TEST(PluginLoading, ACpuRunBuiltInCodeMapsNoCudaOrUcxLibrary) {
  const Model model = Model::classifier(
      api_test::kFeatures, {layers::linear(api_test::kFeatures, 16, layers::Activation::relu),
                            layers::linear(16, api_test::kClasses)});
  ASSERT_EQ(api_test::train(model, "cpu", 3).losses.size(), 3u);
  const std::vector<std::string> back_ends = mapped(kBackEndLibraries);
  EXPECT_TRUE(back_ends.empty()) << "a CPU run mapped:\n" << joined(back_ends);
}

// The check above can fail: asking about cuda devices maps the plugin where the build has one.
TEST(PluginLoading, AskingForCudaDevicesLoadsThePluginWhereTheBuildHasOne) {
  EXPECT_TRUE(mapped(kCudaLibraries).empty()) << joined(mapped(kCudaLibraries));
  const int devices = cuda_device_count();
  EXPECT_GE(devices, 0);
#if TANDEM_TEST_CUDA_PLUGIN
  EXPECT_TRUE(cuda_backend_built());
  EXPECT_FALSE(mapped({"libtandem_cuda"}).empty());
  EXPECT_FALSE(mapped({"libcudart"}).empty());
#else
  EXPECT_FALSE(cuda_backend_built());
  EXPECT_TRUE(mapped(kCudaLibraries).empty()) << joined(mapped(kCudaLibraries));
#endif
}

}  // namespace
}  // namespace tandem
