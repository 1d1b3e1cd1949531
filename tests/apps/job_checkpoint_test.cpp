// Checkpoints of multi-process jobs through the executable users run: every rank writes the
// files of its own stages and rank 0 commits (train/job_checkpoint.hpp), so the manifest names
// each file's writer, rank 0's memory does not grow with the other ranks' stages, and a rank
// killed at any moment, during either phase of a checkpoint included, leaves a `latest` that
// resumes to exactly the weights of an uninterrupted run.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "rank_process.hpp"
#include "run_command.hpp"
#include "temp_dir.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

const std::string kTandem = TANDEM_CLI;

std::string fingerprint(const std::string& output) {
  const auto at = output.find("parameters fingerprint ");
  if (at == std::string::npos) return "(none)";
  return output.substr(at + 23, 16);
}

// A 4-stage 1F1B MLP of hidden width `width` (stage 0 is the 8 -> 64 layer whatever the width).
std::string config(int width, int steps) {
  const std::string w = std::to_string(width);
  std::string out = "model: {name: mlp, widths: [8, 64, ";
  out += w;
  out += ", ";
  out += w;
  out += ", 4]}\ndata: {kind: teacher, samples: 4096, seed: 1, hidden: 8}\n";
  out += "train:\n  minibatch: 16\n  steps: ";
  out += std::to_string(steps);
  out += "\n  optimizer: {kind: adamw, lr: 2.0e-3}\n  seed: 3\n  log_every: 5\n";
  out += "pipeline:\n  schedule: 1f1b\n  slices: 2\n  stages:\n    - {layers: \"0\"}\n";
  out += "    - {layers: \"1\"}\n    - {layers: \"2\"}\n    - {layers: \"3\"}\n";
  return out;
}

json manifest_of(const fs::path& step_dir) {
  std::ifstream in(step_dir / "manifest.json");
  return json::parse(in);
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

TEST(JobCheckpoint, EveryRankWritesItsOwnStagesAndAnyResumeIsExact) {
  testing::TempDir dir;
  const fs::path c = dir.write("c.yaml", config(32, 20));
  const fs::path ck = dir.path() / "ck";
  const testing::CommandResult job =
      testing::run_command(kTandem + " launch -n 4 " + c.string() + " --checkpoint " + ck.string() +
                           " --checkpoint-every 10 --quiet");
  ASSERT_EQ(job.code, 0) << job.output;
  const json m = manifest_of(ck / "step-00000010");
  ASSERT_EQ(m["stages"].size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(m["stages"][s]["rank"], s) << m["stages"][s].dump();
    EXPECT_EQ(m["stages"][s]["host"], host_name()) << m["stages"][s].dump();
  }
  // `tandem checkpoint inspect` says where each stage's file came from.
  const testing::CommandResult inspect =
      testing::run_command(kTandem + " checkpoint inspect " + (ck / "step-00000010").string());
  ASSERT_EQ(inspect.code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("stage-2.safetensors, "), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find(" bytes, written by rank 2 on " + host_name() + "\n"),
            std::string::npos)
      << inspect.output;
  const testing::CommandResult whole =
      testing::run_command(kTandem + " train " + c.string() + " --quiet");
  ASSERT_EQ(whole.code, 0) << whole.output;
  EXPECT_EQ(fingerprint(job.output), fingerprint(whole.output)) << job.output;
  // The job's step-10 checkpoint resumes as a job and in one process, to the same weights.
  const std::string from = (ck / "step-00000010").string();
  const testing::CommandResult as_job = testing::run_command(
      kTandem + " launch -n 4 " + c.string() + " --resume " + from + " --quiet");
  ASSERT_EQ(as_job.code, 0) << as_job.output;
  EXPECT_EQ(fingerprint(as_job.output), fingerprint(whole.output)) << as_job.output;
  const testing::CommandResult alone =
      testing::run_command(kTandem + " train " + c.string() + " --resume " + from + " --quiet");
  ASSERT_EQ(alone.code, 0) << alone.output;
  EXPECT_EQ(fingerprint(alone.output), fingerprint(whole.output)) << alone.output;
}

// The same config cut into 2 stages under GPipe.
std::string two_stage_gpipe(std::string c) {
  c.replace(c.find("schedule: 1f1b"), 14, "schedule: gpipe");
  c.erase(c.find("    - {layers: \"0\"}"));
  return c + "    - {layers: \"0-1\"}\n    - {layers: \"2-3\"}\n";
}

// A 4-process 1F1B job's checkpoint resumes as a 2-process 2-stage GPipe job: each rank reads
// the layers it now runs from the files that hold them, the run says how it was laid out, the
// next checkpoint's history records it, and the weights are those of the 2-stage plan trained
// from the start (flush schedules: the same numbers, laid out anew).
TEST(JobCheckpoint, AJobsCheckpointResumesAsAJobUnderAnotherPlan) {
  testing::TempDir dir;
  const fs::path four = dir.write("four.yaml", config(32, 20));
  const fs::path two = dir.write("two.yaml", two_stage_gpipe(config(32, 20)));
  const fs::path ck = dir.path() / "ck", ck2 = dir.path() / "ck2";
  const testing::CommandResult job =
      testing::run_command(kTandem + " launch -n 4 " + four.string() + " --checkpoint " +
                           ck.string() + " --checkpoint-every 10 --quiet");
  ASSERT_EQ(job.code, 0) << job.output;
  const testing::CommandResult resumed =
      testing::run_command(kTandem + " launch -n 2 " + two.string() + " --resume " +
                           (ck / "step-00000010").string() + " --checkpoint " + ck2.string());
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const std::string note = "resharded from 4-stage 1f1b [0|1|2|3] to 2-stage gpipe [0-1|2-3]";
  EXPECT_NE(resumed.output.find("[rank 0] " + note), std::string::npos) << resumed.output;
  const json m = manifest_of(ck2 / "step-00000020");
  ASSERT_EQ(m["history"].size(), 1u) << m.dump();
  EXPECT_EQ(m["history"][0].get<std::string>().rfind("step 10: " + note, 0), 0u) << m.dump();
  const testing::CommandResult fresh =
      testing::run_command(kTandem + " train " + two.string() + " --quiet");
  ASSERT_EQ(fresh.code, 0) << fresh.output;
  EXPECT_EQ(fingerprint(resumed.output), fingerprint(fresh.output)) << resumed.output;
  EXPECT_EQ(fingerprint(resumed.output), fingerprint(job.output)) << resumed.output;
}

// A tied parameter whose copies are on two ranks (a on stage 0, b on stage 1; their gradients
// are equal, so the copies stay equal without a sum between stages): rank 1's file leaves the
// copy out, and resuming on 2 processes or on 1 reads it from rank 0's file, to the weights of
// the uninterrupted run.
TEST(JobCheckpoint, ATiedParameterIsStoredOnceAcrossRanksAndResumesExactly) {
  testing::TempDir dir;
  const fs::path c = dir.write("tied.yaml", R"(model:
  input: {name: x, shape: [8]}
  graph:
    - {name: a, layer: linear, out: 16}
    - {name: b, layer: linear, out: 16, inputs: [x]}
    - {name: s, layer: add, inputs: [a, b]}
    - {name: out, layer: linear, out: 4}
  tie: [[a.weight, b.weight], [a.bias, b.bias]]
data: {kind: teacher, samples: 512, seed: 3}
train: {minibatch: 8, steps: 12, seed: 1, optimizer: {kind: adamw, lr: 0.01}}
pipeline:
  schedule: 1f1b
  slices: 2
  stages:
    - {layers: "0"}
    - {layers: "1-3"}
)");
  const fs::path ck = dir.path() / "ck";
  const testing::CommandResult whole =
      testing::run_command(kTandem + " train " + c.string() + " --quiet");
  ASSERT_EQ(whole.code, 0) << whole.output;
  const testing::CommandResult first = testing::run_command(
      kTandem + " launch -n 2 " + c.string() + " --steps 6 --checkpoint " + ck.string());
  ASSERT_EQ(first.code, 0) << first.output;
  const json m = manifest_of(ck / "step-00000006");
  EXPECT_EQ(m["stages"][1]["rank"], 1) << m.dump();
  // Stage 1's file: version 6 of layer 3 only (weight and bias), and their two moments.
  EXPECT_EQ(m["stages"][1]["weights"][0]["tensors"], 2) << m.dump();
  EXPECT_EQ(m["stages"][1]["optimizer"][0]["tensors"], 4) << m.dump();
  const testing::CommandResult two =
      testing::run_command(kTandem + " launch -n 2 " + c.string() + " --resume " + ck.string());
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_EQ(fingerprint(two.output), fingerprint(whole.output)) << two.output;
  const testing::CommandResult one =
      testing::run_command(kTandem + " train " + c.string() + " --quiet --resume " + ck.string());
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_EQ(fingerprint(one.output), fingerprint(whole.output)) << one.output;
}

// Rank 0's peak resident memory over a job checkpointing every 5 steps, from its metrics.
double rank0_peak_mib(testing::TempDir& dir, int width) {
  std::string name = "w";
  name += std::to_string(width);
  const fs::path metrics = dir.path() / (name + ".jsonl");
  // A fixed mmap threshold and two arenas: freed blocks go back to the system, so what is
  // resident is what is held (see Launch.RankZerosMemoryStaysFlatOverCheckpoints).
  const testing::CommandResult job =
      testing::run_command("MALLOC_MMAP_THRESHOLD_=65536 MALLOC_ARENA_MAX=2 " + kTandem +
                           " launch -n 4 " + dir.write(name + ".yaml", config(width, 20)).string() +
                           " --checkpoint " + (dir.path() / (name + "-ck")).string() +
                           " --checkpoint-every 5 --quiet --metrics-json " + metrics.string());
  EXPECT_EQ(job.code, 0) << job.output;
  double peak = 0;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    peak = std::max(peak, json::parse(line).at("resident_mib").get<double>());
  }
  return peak;
}

// Stages 2 and 3 hold 2 * 1536^2 weights (18 MiB) and AdamW's two moments (36 MiB more); rank 0
// runs stage 0 (8 x 64). When rank 0 gathered the job's state to write checkpoints it held all
// of that (and its encoding); now its memory is the same as with 64-wide stages.
TEST(JobCheckpoint, RankZerosMemoryDoesNotGrowWithTheOtherRanksStages) {
  testing::TempDir dir;
  const double small = rank0_peak_mib(dir, 64);
  const double large = rank0_peak_mib(dir, 1536);
  std::printf("rank 0 peak resident: %.1f MiB with 64-wide stages, %.1f MiB with 1536-wide\n",
              small, large);
  ASSERT_GT(small, 0);
  EXPECT_LT(large - small, 8.0) << "rank 0 grew with the other ranks' stages (54 MiB of state)";
}

// Kills one rank (each in turn) at a random moment of a job that checkpoints every step: writing
// the checkpoints takes about 90% of this job's time (7.9 s against 0.8 s without, on the
// development machine), so most kills land while ranks write their files or rank 0 commits;
// whatever `latest` names then resumes, in one process, to the uninterrupted run's weights.
TEST(JobCheckpoint, AKilledRankLeavesALatestThatResumesExactly) {
  testing::TempDir dir;
  const int steps = 400;
  const fs::path c = dir.write("c.yaml", config(256, steps));
  const testing::CommandResult whole =
      testing::run_command(kTandem + " train " + c.string() + " --quiet");
  ASSERT_EQ(whole.code, 0) << whole.output;
  std::mt19937 rng(std::random_device{}());
  for (int victim_rank = 0; victim_rank < 4; ++victim_rank) {
    const fs::path ck = dir.path() / ("ck" + std::to_string(victim_rank));
    const std::string mark =
        "TANDEM_TEST_MARK=" + std::to_string(::getpid()) + "-ck" + std::to_string(victim_rank);
    testing::CommandResult job;
    std::thread launcher([&] {
      job = testing::run_command(mark + " " + kTandem + " launch -n 4 " + c.string() +
                                 " --checkpoint " + ck.string() + " --checkpoint-every 1");
    });
    pid_t victim = -1;
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (victim < 0 && std::chrono::steady_clock::now() < deadline) {
      if (fs::exists(ck / "latest")) {
        std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
        victim = testing::find_rank(mark, victim_rank);
      }
      std::this_thread::sleep_for(5ms);
    }
    if (victim > 0) ::kill(victim, SIGKILL);
    launcher.join();
    ASSERT_GT(victim, 0) << "no checkpoint or no rank " << victim_rank << " within 120 s";
    if (job.code == 0) continue;  // the job ended before the kill
    const testing::CommandResult resumed = testing::run_command(
        kTandem + " train " + c.string() + " --resume " + ck.string() + " --quiet");
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_EQ(fingerprint(resumed.output), fingerprint(whole.output))
        << "rank " << victim_rank << " killed:\n"
        << resumed.output;
  }
}

}  // namespace
}  // namespace tandem::apps
