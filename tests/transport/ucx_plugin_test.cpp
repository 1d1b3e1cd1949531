// The ucx data plane is a plugin loaded on first use (transport/ucx_data_plane.hpp): this
// executable links the core's transport only, so UCX's libraries are not mapped until a channel
// is asked for; then the plugin loads, registers its factory once, and makes working channels.
// Checked in this process's /proc/self/maps (each test runs in a process of its own under ctest).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../support/mapped_libraries.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/plugin.hpp"
#include "runtime/scheduler.hpp"
#include "transport/ucx_data_plane.hpp"

namespace tandem::transport {
namespace {

const std::vector<std::string> kUcxLibraries = {"libucp", "libtandem_ucx"};

using test_support::mapped;

TEST(UcxPlugin, UcxIsMappedOnlyOnceAChannelIsAskedFor) {
  EXPECT_TRUE(mapped(kUcxLibraries).empty()) << mapped(kUcxLibraries).front();
  EXPECT_FALSE(plugin_loaded("ucx"));
  ASSERT_TRUE(ucx_available()) << plugin_problem("ucx");
  EXPECT_TRUE(plugin_loaded("ucx"));
  EXPECT_FALSE(mapped({"libtandem_ucx"}).empty());
  EXPECT_FALSE(mapped({"libucp"}).empty());
  ActorSystem system(make_work_sharing({.workers = 1}));
  std::unique_ptr<UcxDataPlane> channel = make_ucx_channel(system, UcxChannelOptions{});
  ASSERT_NE(channel, nullptr);
  EXPECT_FALSE(channel->worker_address().empty());
  channel->close();
  system.stop();
}

}  // namespace
}  // namespace tandem::transport
