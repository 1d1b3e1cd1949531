// `tandem simulate` through its CLI11 registration, as main() runs it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "apps/commands.hpp"

namespace tandem::apps {
namespace {

// Runs `tandem <args>` and returns what it printed.
std::string run(const std::string& args) {
  CLI::App app{"tandem"};
  add_simulate_command(app);
  std::ostringstream captured;
  auto* old = std::cout.rdbuf(captured.rdbuf());
  try {
    app.parse(args, false);
  } catch (...) {
    std::cout.rdbuf(old);
    throw;
  }
  std::cout.rdbuf(old);
  return captured.str();
}

std::string error_of(const std::string& args) {
  try {
    run(args);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A file name private to this process and test.
std::filesystem::path temp_file(const std::string& suffix) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::filesystem::temp_directory_path() /
         ("tandem_" + std::string(test->name()) + "_" + std::to_string(::getpid()) + suffix);
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

TEST(SimulateCommand, TableTimelineAndSvg) {
  const auto svg = temp_file(".svg");
  const std::string out =
      run("simulate --schedule 1f1b -p 4 -m 8 --tf 1 --tb 2 --delay 0.5 --svg " + svg.string());
  EXPECT_NE(out.find("makespan 41"), std::string::npos) << out;
  EXPECT_NE(out.find("d3   |"), std::string::npos) << out;
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(svg);
  const std::string s = text.str();
  EXPECT_EQ(s.rfind("<svg", 0), 0u);
  EXPECT_EQ(count(s, "<rect class=\"op\""), 4u * 17u);  // 2m actions + STEP per device
  EXPECT_NE(s.find("</svg>"), std::string::npos);
}

TEST(SimulateCommand, JsonAndPerStageCosts) {
  const std::string out =
      run("simulate --schedule gpipe -p 4 -m 8 --tf 1,2,1,1 --tb 2,4,2,2 --json");
  EXPECT_NE(out.find("\"makespan\": 57"), std::string::npos) << out;
  const std::string um =
      run("simulate --schedule umpipe -p 2 --forward-slices 1,3;1,3 --backward-slices 3,1;3,1 "
          "--tf b,2+0.5b --tb 2b,4+b");
  EXPECT_NE(um.find("makespan 22.5"), std::string::npos) << um;
}

TEST(SimulateCommand, HandWrittenOrder) {
  const auto path = temp_file(".txt");
  {
    std::ofstream f(path);
    f << "schedule custom stages=2 slices=2\nd0: F0 F1 B0 B1 STEP\nd1: F0 B0 F1 B1 STEP\n";
  }
  const std::string out = run("simulate --order " + path.string() + " --tf 1 --tb 2");
  EXPECT_NE(out.find("makespan 9"), std::string::npos) << out;
  {
    std::ofstream f(path);
    f << "d0: F0 B0 F1 B1 STEP\nd1: B0 F0 F1 B1 STEP\n";
  }
  EXPECT_NE(error_of("simulate --order " + path.string()).find("deadlock"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(SimulateCommand, BadInputIsNamed) {
  EXPECT_NE(error_of("simulate --schedule warp").find("unknown schedule 'warp'"),
            std::string::npos);
  EXPECT_NE(error_of("simulate -p 4 --tf 1,2,3").find("--tf: expected 1 or 4 values, got 3"),
            std::string::npos);
  EXPECT_NE(error_of("simulate --tb x").find("--tb: 'x' is not a non-negative number"),
            std::string::npos);
  EXPECT_NE(error_of("simulate --schedule interleaved -p 4 -m 6 -v 2").find("multiple of stages"),
            std::string::npos);
  EXPECT_NE(error_of("simulate --replicas 2,0").find("--replicas: '0'"), std::string::npos);
  EXPECT_NE(error_of("simulate --order /nonexistent/x").find("cannot read"), std::string::npos);
  EXPECT_NE(error_of("simulate --bandwidth 0").find("--bandwidth"), std::string::npos);
}

}  // namespace
}  // namespace tandem::apps
