// The `tandem` executable as a user meets it: usage with no argument, --version, one
// "tandem: error:" line and the documented exit codes (docs/cli.md) for every failure, and
// never a bare C++ exception text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "apps/output_file.hpp"
#include "run_command.hpp"

namespace tandem::apps {
namespace {

using Result = testing::CommandResult;  // output: stdout and stderr

Result tandem(const std::string& args) {
  return testing::run_command(std::string(TANDEM_CLI) + " " + args);
}

const std::string kSource = TANDEM_SOURCE_DIR;

TEST(Cli, UsageAndVersion) {
  const Result none = tandem("");
  EXPECT_EQ(none.code, 0);
  EXPECT_NE(none.output.find("Usage: tandem"), std::string::npos) << none.output;
  EXPECT_NE(none.output.find("simulate"), std::string::npos) << none.output;
  const Result version = tandem("--version");
  EXPECT_EQ(version.code, 0);
  EXPECT_EQ(version.output.rfind("tandem ", 0), 0u) << version.output;
}

// Command-line mistakes: exit 2, one "tandem: error:" line and a pointer to --help.
TEST(Cli, UsageErrorsExitWithTwo) {
  const std::string plan = "plan --profile " + kSource + "/configs/examples/profile-gpt14.json" +
                           " --cluster " + kSource + "/configs/examples/cluster-cpu4.yaml";
  for (const std::string& args :
       {std::string("--bogus"), std::string("simulate --minibatch 0"),
        std::string("simulate -p -3"), std::string("simulate --schedule warp"),
        plan + " -s umpipe --seed -1", plan + " -s pipedream --slices 4",
        std::string("train --steps 0"), std::string("frobnicate")}) {
    const Result r = tandem(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("tandem: error: ", 0), 0u) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("--help"), std::string::npos) << args << "\n" << r.output;
  }
}

// Failures of the run or its inputs: exit 1, one "tandem: error:" line naming what and where.
TEST(Cli, InputErrorsExitWithOne) {
  for (const auto& [args, words] :
       {std::pair<std::string, std::string>{"train /dev/zero", "/dev/zero: is not a regular file"},
        {"train " + std::filesystem::temp_directory_path().string(), "is a directory"},
        {"train /nonexistent/tandem.yaml", "cannot open the config file"},
        {"simulate -p 4 -m 8 --tf 1e308", "makespan is inf"},
        {"train --dry-run /dev/null", "is not a regular file"}}) {
    const Result r = tandem(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("tandem: error: ", 0), 0u) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << args << "\n" << r.output;
    for (const char* raw : {"std::", "bad_alloc", "filesystem error", "terminate"}) {
      EXPECT_EQ(r.output.find(raw), std::string::npos) << args << "\n" << r.output;
    }
  }
}

// --set overrides the embedded default config as any file's; its mistakes name the override.
TEST(Cli, SetOverridesAKeyAndItsErrorsNameTheOverride) {
  const Result ok = tandem("train --dry-run --set train.steps=3 --set pipeline.schedule=gpipe");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("gpipe"), std::string::npos) << ok.output;
  for (const auto& [args, words] :
       {std::pair<std::string, std::string>{"train --dry-run --set train.steps",
                                            "--set train.steps: expected KEY=VALUE"},
        {"train --dry-run --set train.steps=-1", "--set train.steps:1:1: train.steps"},
        {"train --dry-run --set train.stepz=1", "--set train.stepz: train.stepz: unknown key"},
        {"train --dry-run --set pipeline.stages[9].replicas=2", "index 9 is past its end"},
        {"bench " + kSource + "/configs/mlp-teacher.yaml --set 'train.steps=[1'",
         "YAML syntax error"}}) {
    const Result r = tandem(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("tandem: error: ", 0), 0u) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << args << "\n" << r.output;
  }
}

// A config far larger than the machine is refused at once, at its key.
TEST(Cli, HugeConfigIsRefusedBeforeAllocating) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("tandem_cli_huge_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream f(path);
    f << "model: {name: gpt, layers: 100000000, d_model: 64, heads: 4, seq_len: 16, vocab: 64}\n"
         "data: {kind: markov-text}\n"
         "train: {minibatch: 8, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n";
  }
  const Result r = tandem("train --dry-run " + path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(":1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.layers"), std::string::npos) << r.output;
}

// A failed write leaves neither a partial output nor a temporary file.
TEST(Cli, FailedWriteLeavesNoTemporary) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("tandem_cli_out_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "target" / "occupied");
  // Renaming a file over a non-empty directory fails after the temporary was written.
  EXPECT_THROW(write_output(dir / "target", "text"), std::runtime_error);
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename(), "target") << e.path();
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  write_output(dir / "file.txt", "text");
  std::ifstream in(dir / "file.txt");
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "text");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::apps
