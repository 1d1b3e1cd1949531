// The plugin loader (runtime/plugin.hpp) against what it may find: a plugin that registers, a
// missing one, a library without the entry point, a file that is not a library, and names that
// try to leave the plugin folder. Each case uses a name of its own: a plugin's answer is kept
// for the life of the process.
#include "runtime/plugin.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tandem {
namespace {

namespace fs = std::filesystem;

// A plugin folder of this test's own, TANDEM_PLUGIN_DIR pointing at it while it lives.
class PluginDir {
 public:
  PluginDir()
      : path_(fs::temp_directory_path() / ("tandem_plugins_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
    ::setenv("TANDEM_PLUGIN_DIR", path_.c_str(), 1);
  }
  ~PluginDir() {
    ::unsetenv("TANDEM_PLUGIN_DIR");
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  PluginDir(const PluginDir&) = delete;
  PluginDir& operator=(const PluginDir&) = delete;

  void copy_in(const std::string& from, const std::string& name) const {
    fs::copy_file(from, path_ / ("libtandem_" + name + ".so"));
  }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path_ / ("libtandem_" + name + ".so"), std::ios::binary) << bytes;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(Plugin, APluginIsLoadedOnceAndItsEntryPointRuns) {
  PluginDir dir;
  dir.copy_in(TANDEM_TEST_REGISTERING_PLUGIN, "registering");
  ::unsetenv("TANDEM_TEST_PLUGIN_REGISTERED");
  EXPECT_FALSE(plugin_loaded("registering"));
  EXPECT_TRUE(load_plugin("registering"));
  EXPECT_TRUE(plugin_loaded("registering"));
  EXPECT_EQ(plugin_problem("registering"), "");
  const char* mark = std::getenv("TANDEM_TEST_PLUGIN_REGISTERED");
  ASSERT_NE(mark, nullptr);
  // Once: a second load does not run the entry point again.
  ::unsetenv("TANDEM_TEST_PLUGIN_REGISTERED");
  EXPECT_TRUE(load_plugin("registering"));
  EXPECT_EQ(std::getenv("TANDEM_TEST_PLUGIN_REGISTERED"), nullptr);
}

TEST(Plugin, AMissingPluginIsAbsentAndSaysWhereItWasLookedFor) {
  PluginDir dir;
  EXPECT_FALSE(load_plugin("missing"));
  EXPECT_FALSE(plugin_loaded("missing"));
  const std::string why = plugin_problem("missing");
  EXPECT_NE(why.find("not installed"), std::string::npos) << why;
  EXPECT_NE(why.find(dir.path().string()), std::string::npos) << why;
}

TEST(Plugin, ALibraryWithoutTheEntryPointIsRefused) {
  PluginDir dir;
  dir.copy_in(TANDEM_TEST_ENTRYLESS_PLUGIN, "entryless");
  EXPECT_FALSE(load_plugin("entryless"));
  const std::string why = plugin_problem("entryless");
  EXPECT_NE(why.find("no entry point tandem_plugin_register_v1"), std::string::npos) << why;
}

TEST(Plugin, AFileThatIsNotALibraryIsRefusedWithTheLoadersReason) {
  PluginDir dir;
  dir.write("garbage", std::string(4096, '\x7f') + "not an ELF file");
  dir.write("empty", "");
  for (const char* name : {"garbage", "empty"}) {
    EXPECT_FALSE(load_plugin(name)) << name;
    const std::string why = plugin_problem(name);
    EXPECT_NE(why.find("libtandem_" + std::string(name) + ".so"), std::string::npos) << why;
  }
}

TEST(Plugin, NamesThatCouldLeaveThePluginFolderAreRefused) {
  PluginDir dir;
  // A real plugin one level up: "../registering" must not reach it.
  dir.copy_in(TANDEM_TEST_REGISTERING_PLUGIN, "registering");
  const std::vector<std::string> names = {"../registering",
                                          "/etc/passwd",
                                          "a/b",
                                          "",
                                          "UPPER",
                                          "dot.name",
                                          std::string(33, 'a'),
                                          std::string("nul\0byte", 8)};
  for (const std::string& name : names) {
    EXPECT_FALSE(load_plugin(name)) << name;
    EXPECT_NE(plugin_problem(name).find("invalid plugin name"), std::string::npos) << name;
  }
}

TEST(Plugin, TheFolderIsTheCoresOwnUnlessTheEnvironmentNamesOne) {
  ::unsetenv("TANDEM_PLUGIN_DIR");
  const std::string own = plugin_dir();
  EXPECT_TRUE(fs::exists(fs::path(own) / "libtandem_runtime.so")) << own;
  PluginDir dir;
  EXPECT_EQ(plugin_dir(), dir.path().string());
}

}  // namespace
}  // namespace tandem
