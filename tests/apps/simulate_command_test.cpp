// `tandem simulate` through its CLI11 registration, as main() runs it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

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

// What --print-order prints, --order reads back to the same schedule, for every kind: the same
// actions (printed again identically) and the same makespan. It prints the order alone, so its
// output redirected to a file is what --order reads.
TEST(SimulateCommand, PrintOrderRoundTripsForEverySchedule) {
  const auto path = temp_file(".txt");
  const std::vector<std::string> cases = {
      "--schedule naive -p 3 -m 4",
      "--schedule gpipe -p 4 -m 8 --minibatch 32 --remat",
      "--schedule 1f1b -p 3 -m 4 --replicas 2,1,1",
      "--schedule pipedream -p 3 -m 6 --replicas 2,1,1",
      "--schedule pipedream-vsync -p 4 -m 8",
      "--schedule 2bw -p 4 -m 4 -n 3",
      "--schedule interleaved -p 4 -m 8 -v 2",
      "--schedule zb-h1 -p 4 -m 8 --minibatch 12",
      "--schedule umpipe -p 2 -m 4 --minibatch 10",
      "--schedule umpipe -p 2 --forward-slices 1,3;2,2 --backward-slices 3,1;1,1,1,1"};
  const auto makespan = [](const std::string& text) {
    const auto at = text.find("makespan ");
    if (at == std::string::npos) return std::string("(none)");
    return text.substr(at, text.find(' ', at + 9) - at);
  };
  int checked = 0;
  for (const std::string& flags : cases) {
    const std::string costs = " --tf 1+0.5b --tb 2+b --tw 0.5";
    const std::string order = run("simulate " + flags + costs + " --print-order");
    ASSERT_EQ(order.rfind("schedule ", 0), 0u) << flags << ":\n" << order;
    EXPECT_EQ(order.find("makespan"), std::string::npos) << flags << ":\n" << order;
    {
      std::ofstream f(path);
      f << order;
    }
    EXPECT_EQ(run("simulate --order " + path.string() + costs + " --print-order"), order) << flags;
    const std::string direct = run("simulate " + flags + costs);
    EXPECT_NE(makespan(direct), "(none)") << flags;
    EXPECT_EQ(makespan(run("simulate --order " + path.string() + costs)), makespan(direct))
        << flags;
    ++checked;
  }
  std::filesystem::remove(path);
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
}

// --table asks for the table and timeline after the order; --json is a report of its own.
TEST(SimulateCommand, PrintOrderWithTheTableOnRequest) {
  const std::string flags = "simulate --schedule 1f1b -p 2 -m 2";
  const std::string order = run(flags + " --print-order");
  const std::string both = run(flags + " --print-order --table");
  ASSERT_EQ(both.rfind(order + "\n", 0), 0u) << both;
  EXPECT_EQ(both.substr(order.size() + 1), run(flags));
  EXPECT_THROW(run(flags + " --table"), CLI::ParseError);
  EXPECT_THROW(run(flags + " --print-order --json"), CLI::ParseError);
}

// An order whose slice runs past its minibatch is refused, naming the token and where it is.
TEST(SimulateCommand, RefusesASliceOutsideItsMinibatch) {
  const auto path = temp_file(".txt");
  {
    std::ofstream f(path);
    f << "schedule custom stages=1 slices=2\nd0: F0[0:1000000000) B0[0:1000000000) STEP\n";
  }
  EXPECT_NE(error_of("simulate --order " + path.string())
                .find("line 2, column 5, token 'F0[0:1000000000)': the slice is outside its "
                      "minibatch [0:2)"),
            std::string::npos)
      << error_of("simulate --order " + path.string());
  std::filesystem::remove(path);
}

// Flags out of range or ignored by the schedule are refused, not clamped or dropped.
TEST(SimulateCommand, RefusesFlagsOutOfRangeOrIgnored) {
  for (const char* args :
       {"simulate --minibatch 0", "simulate -p 0", "simulate -p -3", "simulate -m 0",
        "simulate -n 0", "simulate --delay -1", "simulate --width 0"}) {
    EXPECT_THROW(run(args), CLI::ParseError) << args;
  }
  EXPECT_NE(error_of("simulate --schedule gpipe -v 2").find("--chunks"), std::string::npos);
  EXPECT_NE(error_of("simulate --schedule 1f1b --remat").find("gpipe only"), std::string::npos);
  EXPECT_NE(error_of("simulate --schedule 1f1b --forward-slices 1,3").find("umpipe only"),
            std::string::npos);
  EXPECT_NE(error_of("simulate --schedule pipedream -m 4 -n 8").find("--slices"),
            std::string::npos);
  const auto path = temp_file(".txt");
  {
    std::ofstream f(path);
    f << "d0: F0 B0 STEP\n";
  }
  EXPECT_NE(error_of("simulate --order " + path.string() + " --schedule gpipe")
                .find("--schedule: does not apply with --order"),
            std::string::npos);
  EXPECT_NE(error_of("simulate --order " + path.string() + " -p 2").find("--stages"),
            std::string::npos);
  // --svg never overwrites the order it reads, nor writes into a directory.
  EXPECT_NE(error_of("simulate --order " + path.string() + " --svg " + path.string())
                .find("is an input of this command"),
            std::string::npos);
  EXPECT_NE(error_of("simulate --svg " + std::filesystem::temp_directory_path().string())
                .find("is a directory"),
            std::string::npos);
  std::filesystem::remove(path);
}

// Results that are not finite numbers are errors naming them; sizes that cannot fit are
// refused before anything is built.
TEST(SimulateCommand, NonFiniteResultsAndHugeRunsAreErrors) {
  EXPECT_NE(error_of("simulate -p 4 -m 8 --tf 1e308").find("makespan is inf"), std::string::npos);
  const std::string huge = error_of("simulate -p 100000 -m 100000");
  EXPECT_NE(huge.find("actions would need about"), std::string::npos) << huge;
  EXPECT_NE(huge.find("of memory"), std::string::npos) << huge;
}

}  // namespace
}  // namespace tandem::apps
