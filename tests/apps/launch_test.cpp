// `tandem launch` and `tandem train` as ranks of a multi-process job, through the executable
// users run: 2 and 4 processes train exactly what one process trains (flush and asynchronous
// schedules, a stage whose replicas span processes), a rank killed with SIGKILL ends the job
// with every other rank naming it, and a resume from the last checkpoint finishes the run
// exactly as an uninterrupted one.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/commands.hpp"
#include "apps/local_launcher.hpp"
#include "models/kernels/cpu/bf16_gemm.hpp"
#include "rank_process.hpp"
#include "run_command.hpp"
#include "temp_dir.hpp"

namespace tandem::apps {
namespace {

using namespace std::chrono_literals;

const std::string kTandem = TANDEM_CLI;

std::string fingerprint(const std::string& output) {
  const auto at = output.find("parameters fingerprint ");
  if (at == std::string::npos) return "(none)";
  return output.substr(at + 23, 16);
}

// A 4-stage MLP; `pipeline` is the schedule and stages part.
std::string mlp_config(const std::string& pipeline, int steps) {
  return "model: {name: mlp, widths: [8, 32, 32, 32, 4]}\n"
         "data: {kind: teacher, samples: 4096, seed: 1, hidden: 8}\n"
         "train:\n  minibatch: 16\n  steps: " +
         std::to_string(steps) +
         "\n  optimizer: {kind: adamw, lr: 2.0e-3}\n  seed: 3\n  log_every: 10\n" + pipeline;
}

const std::string k1F1B =
    "pipeline:\n  schedule: 1f1b\n  slices: 4\n  stages:\n    - {layers: \"0\"}\n"
    "    - {layers: \"1\"}\n    - {layers: \"2\"}\n    - {layers: \"3\"}\n";
const std::string kPipeDream =
    "pipeline:\n  schedule: pipedream\n  stages:\n    - {layers: \"0\"}\n"
    "    - {layers: \"1\"}\n    - {layers: \"2\"}\n    - {layers: \"3\"}\n";

// Launches `config` on 2 processes marked `mark`, kills rank 1 with SIGKILL once rank 0 has
// logged a step (so the job trains: a rank killed before it joined is only a rank that never
// came, which rank 0 waits for until its join timeout), and returns the job's result (code -2
// with a message when rank 1 never started or rank 0 never logged).
testing::CommandResult launch_and_kill_rank_1(const std::string& mark,
                                              const std::filesystem::path& config) {
  const std::filesystem::path metrics = config.string() + ".metrics.jsonl";
  testing::CommandResult job;
  std::thread launcher([&] {
    job = testing::run_command(mark + " " + kTandem + " launch -n 2 " + config.string() +
                               " --metrics-json " + metrics.string());
  });
  pid_t victim = -1;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  const auto logged = [&] {
    std::error_code ec;
    return std::filesystem::file_size(metrics, ec) > 0 && !ec;
  };
  while ((victim <= 0 || !logged()) && std::chrono::steady_clock::now() < deadline) {
    if (victim <= 0) victim = testing::find_rank(mark, 1);
    std::this_thread::sleep_for(20ms);
  }
  const bool trained = victim > 0 && logged();
  if (victim > 0) ::kill(victim, SIGKILL);
  launcher.join();
  if (victim <= 0) return {-2, "no rank 1 within 60 s\n" + job.output};
  if (!trained) return {-2, "rank 0 logged no step within 60 s\n" + job.output};
  return job;
}

TEST(Launch, RanksTrainExactlyWhatOneProcessTrains) {
  testing::TempDir dir;
  for (const auto& [name, pipeline] :
       {std::pair{"1f1b", k1F1B}, std::pair{"pipedream", kPipeDream}}) {
    const testing::CommandResult one = testing::run_command(
        kTandem + " train " +
        dir.write(std::string(name) + ".yaml", mlp_config(pipeline, 24)).string() + " --quiet");
    ASSERT_EQ(one.code, 0) << one.output;
    // Over both data planes (the config's cluster.transport), on 2 and 4 processes.
    for (const std::string transport : {"tcp", "ucx"}) {
      const auto config =
          dir.write(std::string(name) + "-" + transport + ".yaml",
                    mlp_config(pipeline, 24) + "cluster: {transport: " + transport + "}\n");
      for (int n : {2, 4}) {
        const testing::CommandResult job = testing::run_command(
            kTandem + " launch -n " + std::to_string(n) + " " + config.string() + " --quiet");
        ASSERT_EQ(job.code, 0) << job.output;
        EXPECT_EQ(fingerprint(job.output), fingerprint(one.output))
            << name << " over " << transport << ", " << n << " processes:\n"
            << job.output;
        // Only rank 0 reports the summary.
        EXPECT_NE(job.output.find("[rank 0] parameters fingerprint"), std::string::npos);
        EXPECT_EQ(job.output.find("[rank 1] parameters fingerprint"), std::string::npos);
      }
    }
  }
}

// A graph's tensors that skip stages cross processes straight to the rank that reads them (their
// edge in the message tag), and their gradients straight back: the job trains what one process
// trains, with the skips sent straight or relayed.
TEST(Launch, AGraphsSkipEdgesCrossProcesses) {
  testing::TempDir dir;
  const auto config = std::filesystem::path(TANDEM_SOURCE_DIR) / "configs" / "mlp-graph-skip.yaml";
  std::ifstream in(config);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("steps: 600"), 10, "steps: 40");
  const std::string relayed = std::string(text).replace(text.find("  schedule: 1f1b\n"), 17,
                                                        "  schedule: 1f1b\n  skip_edges: relay\n");
  const testing::CommandResult one =
      testing::run_command(kTandem + " train " + dir.write("one.yaml", text).string() + " --quiet");
  ASSERT_EQ(one.code, 0) << one.output;
  for (const auto& [name, yaml] : {std::pair{"direct", text}, std::pair{"relay", relayed}}) {
    const testing::CommandResult job =
        testing::run_command(kTandem + " launch -n 4 " +
                             dir.write(std::string(name) + ".yaml", yaml).string() + " --quiet");
    ASSERT_EQ(job.code, 0) << job.output;
    EXPECT_EQ(fingerprint(job.output), fingerprint(one.output)) << name << ":\n" << job.output;
  }
}

// A GPT whose head reuses its token embedding, the two copies on ranks 0 and 3: their gradients
// meet in a Gloo all-reduce at every round's SYNC, under 1F1B and under PipeDream.
TEST(Launch, TiedEmbeddingsSumAcrossProcesses) {
  testing::TempDir dir;
  for (const std::string schedule : {"1f1b", "pipedream"}) {
    const std::string yaml =
        "model: {name: gpt, layers: 2, d_model: 16, heads: 2, seq_len: 8, vocab: 24, "
        "tie_embeddings: true}\n"
        "data: {kind: markov-text, vocab: 24, samples: 512, seed: 1}\n"
        "train: {minibatch: 8, steps: 12, seed: 3, optimizer: {kind: adamw, lr: 1.0e-2}}\n"
        "pipeline:\n  schedule: " +
        schedule + (schedule == "1f1b" ? "\n  slices: 4\n" : "\n") +
        "  stages:\n    - {layers: \"0\"}\n    - {layers: \"1\"}\n    - {layers: \"2\"}\n"
        "    - {layers: \"3-4\"}\n";
    const std::string file = dir.write(schedule + ".yaml", yaml).string();
    const testing::CommandResult one =
        testing::run_command(kTandem + " train " + file + " --quiet");
    ASSERT_EQ(one.code, 0) << one.output;
    const testing::CommandResult job =
        testing::run_command(kTandem + " launch -n 4 " + file + " --quiet");
    ASSERT_EQ(job.code, 0) << job.output;
    EXPECT_EQ(fingerprint(job.output), fingerprint(one.output)) << schedule << ":\n" << job.output;
  }
}

// The tied copies on ranks 0 and 1 meet at every round's SYNC, so rank 0 spends much of its time
// inside that all-reduce: killing rank 1 mid-run must end the job (not hang it), rank 0 naming
// the lost rank.
TEST(Launch, AKilledRankEndsATiedJob) {
  testing::TempDir dir;
  const auto config =
      dir.write("tied.yaml",
                "model: {name: gpt, layers: 2, d_model: 16, heads: 2, seq_len: 8, vocab: 24, "
                "tie_embeddings: true}\n"
                "data: {kind: markov-text, vocab: 24, samples: 512, seed: 1}\n"
                "train: {minibatch: 8, steps: 100000, seed: 3, log_every: 50, "
                "optimizer: {kind: adamw, lr: 1.0e-3}}\n"
                "pipeline:\n  schedule: 1f1b\n  slices: 2\n  stages:\n    - {layers: \"0-1\"}\n"
                "    - {layers: \"2-4\"}\n");
  const std::string mark = "TANDEM_TEST_MARK=" + std::to_string(::getpid()) + "-tiekill";
  const testing::CommandResult job = launch_and_kill_rank_1(mark, config);
  ASSERT_NE(job.code, -2) << job.output;
  EXPECT_EQ(job.code, 1) << job.output;
  EXPECT_NE(job.output.find("rank 1 was killed by signal 9"), std::string::npos) << job.output;
  const auto at = job.output.find("[rank 0] tandem: error: ");
  ASSERT_NE(at, std::string::npos) << job.output;
  const std::string line = job.output.substr(at, job.output.find('\n', at) - at);
  EXPECT_NE(line.find("rank 1"), std::string::npos) << line;
  EXPECT_NE(line.find("lost"), std::string::npos) << line;
}

// Global clipping's norm meets in an all-reduce of every stage at each round's SYNC (Gloo across
// ranks): 2 and 4 processes clip exactly as one process does, and print its norms.
TEST(Launch, GlobalClippingSpansProcesses) {
  testing::TempDir dir;
  const std::string yaml = mlp_config(k1F1B, 12) + "";
  std::string clipped = yaml;
  clipped.replace(clipped.find("  log_every: 10\n"), 16,
                  "  log_every: 4\n  clip_grad_norm: 0.05\n  accumulate: 2\n");
  const std::string file = dir.write("clip.yaml", clipped).string();
  const testing::CommandResult one = testing::run_command(kTandem + " train " + file);
  ASSERT_EQ(one.code, 0) << one.output;
  ASSERT_NE(one.output.find("grad norm "), std::string::npos) << one.output;
  for (int n : {2, 4}) {
    const testing::CommandResult job =
        testing::run_command(kTandem + " launch -n " + std::to_string(n) + " " + file);
    ASSERT_EQ(job.code, 0) << job.output;
    EXPECT_EQ(fingerprint(job.output), fingerprint(one.output)) << n << ":\n" << job.output;
    // The same norms, printed by rank 0.
    for (std::size_t at = one.output.find("grad norm "); at != std::string::npos;
         at = one.output.find("grad norm ", at + 1)) {
      const std::string norm = one.output.substr(at, 17);
      EXPECT_NE(job.output.find(norm), std::string::npos) << norm << " in\n" << job.output;
    }
  }
}

// At bf16 precision activations and gradients cross processes in bf16 (the tcp data plane
// carries the wire's dtype); a chain of Linear layers rounds them anyway, so the job ends where
// one process does, with the wire in bf16 or f32.
TEST(Launch, Bf16TensorsBetweenProcessesChangeNoWeight) {
  if (!models::cpu::bf16_gemm_native()) GTEST_SKIP() << "no AVX512-BF16 or AMX: f32 products";
  testing::TempDir dir;
  std::string yaml = mlp_config(k1F1B, 12);
  yaml.replace(yaml.find("  log_every: 10\n"), 16, "  log_every: 4\n  precision: bf16\n");
  std::string f32_wire = yaml;
  f32_wire.replace(f32_wire.find("  stages:"), 9, "  wire_dtype: f32\n  stages:");
  const std::string file = dir.write("bf16.yaml", yaml).string();
  const testing::CommandResult one =
      testing::run_command(kTandem + " train " + dir.write("f32wire.yaml", f32_wire).string());
  ASSERT_EQ(one.code, 0) << one.output;
  const testing::CommandResult job = testing::run_command(kTandem + " launch -n 2 " + file);
  ASSERT_EQ(job.code, 0) << job.output;
  EXPECT_EQ(fingerprint(job.output), fingerprint(one.output)) << job.output;
}

// A rank killed while the others wait in the norm's all-reduce ends the job, naming it.
TEST(Launch, AKilledRankEndsAClippedJob) {
  testing::TempDir dir;
  std::string yaml = mlp_config(k1F1B, 1000000);
  yaml.replace(yaml.find("  log_every: 10\n"), 16, "  log_every: 100\n  clip_grad_norm: 0.05\n");
  const auto config = dir.write("clipkill.yaml", yaml);
  const std::string mark = "TANDEM_TEST_MARK=" + std::to_string(::getpid()) + "-clipkill";
  const testing::CommandResult job = launch_and_kill_rank_1(mark, config);
  ASSERT_NE(job.code, -2) << job.output;
  EXPECT_EQ(job.code, 1) << job.output;
  const auto at = job.output.find("[rank 0] tandem: error: ");
  ASSERT_NE(at, std::string::npos) << job.output;
  const std::string line = job.output.substr(at, job.output.find('\n', at) - at);
  EXPECT_NE(line.find("rank 1"), std::string::npos) << line;
}

TEST(Launch, AStageWhoseReplicasSpanProcessesReducesThroughGloo) {
  testing::TempDir dir;
  // Stage 0's two replicas on ranks 0 and 1; their gradients meet in Gloo's all-reduce.
  const std::string placed =
      "pipeline:\n  schedule: 1f1b\n  slices: 4\n  stages:\n"
      "    - {layers: \"0-1\", replicas: 2, ranks: [0, 1]}\n    - {layers: \"2-3\", rank: "
      "1}\n";
  std::string local = placed;
  local.replace(local.find(", ranks: [0, 1]"), 15, "");
  local.replace(local.find(", rank: 1"), 9, "");
  const testing::CommandResult one = testing::run_command(
      kTandem + " train " + dir.write("one.yaml", mlp_config(local, 12)).string() + " --quiet");
  ASSERT_EQ(one.code, 0) << one.output;
  const testing::CommandResult job =
      testing::run_command(kTandem + " launch -n 2 " +
                           dir.write("two.yaml", mlp_config(placed, 12)).string() + " --quiet");
  ASSERT_EQ(job.code, 0) << job.output;
  EXPECT_EQ(fingerprint(job.output), fingerprint(one.output)) << job.output;
}

TEST(Launch, APlacementBeyondTheJobIsAnErrorAtItsKey) {
  testing::TempDir dir;
  const std::string placed =
      "pipeline:\n  schedule: 1f1b\n  stages:\n    - {layers: \"0-1\", rank: 0}\n"
      "    - {layers: \"2-3\", rank: 2}\n";
  const testing::CommandResult job = testing::run_command(
      kTandem + " launch -n 2 " + dir.write("c.yaml", mlp_config(placed, 4)).string() + " --quiet");
  EXPECT_EQ(job.code, 1) << job.output;
  EXPECT_NE(job.output.find("is placed on rank 2, but the job has 2 processes"), std::string::npos)
      << job.output;
  EXPECT_NE(job.output.find("launch: 2 of 2 ranks failed"), std::string::npos) << job.output;
}

TEST(Launch, AKilledRankEndsTheJobAndAResumeFinishesIt) {
  testing::TempDir dir;
  const auto config = dir.write("c.yaml", mlp_config(k1F1B, 2000));
  const std::string mark = "TANDEM_TEST_MARK=" + std::to_string(::getpid()) + "-kill";
  const auto ck = dir.path() / "ck";
  testing::CommandResult job;
  std::thread launcher([&] {
    job = testing::run_command(mark + " " + kTandem + " launch -n 3 " + config.string() +
                               " --checkpoint " + ck.string() + " --checkpoint-every 100");
  });
  // Kill rank 1 once the first checkpoint is written (the job is well under way).
  pid_t victim = -1;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(ck / "latest")) {
      // Into the next segment: the kill lands mid-run, not between segments.
      std::this_thread::sleep_for(100ms);
      victim = testing::find_rank(mark, 1);
      if (victim > 0) break;
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GT(victim, 0) << "no checkpoint or no rank 1 within 120 s";
  const auto killed = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  launcher.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("the job ended %.2f s after rank 1 was killed\n", seconds);
  EXPECT_EQ(job.code, 1) << job.output;
  EXPECT_NE(job.output.find("rank 1 was killed by signal 9"), std::string::npos) << job.output;
  // Every surviving rank fails naming the lost one and its host.
  for (int r : {0, 2}) {
    const std::string prefix = "[rank " + std::to_string(r) + "] tandem: error: ";
    const auto at = job.output.find(prefix);
    ASSERT_NE(at, std::string::npos) << job.output;
    const std::string line = job.output.substr(at, job.output.find('\n', at) - at);
    EXPECT_NE(line.find("rank 1"), std::string::npos) << line;
    EXPECT_NE(line.find("127.0.0.1"), std::string::npos) << line;
    EXPECT_NE(line.find("lost"), std::string::npos) << line;
  }

  const testing::CommandResult resumed = testing::run_command(
      kTandem + " launch -n 3 " + config.string() + " --resume " + ck.string() + " --quiet");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const testing::CommandResult whole =
      testing::run_command(kTandem + " train " + config.string() + " --quiet");
  ASSERT_EQ(whole.code, 0) << whole.output;
  EXPECT_EQ(fingerprint(resumed.output), fingerprint(whole.output)) << resumed.output;
}

// Rank 0 keeps none of the other ranks' state: the hand-over between segments leaves the
// control plane's store as it found it, so rank 0's memory after 200 checkpoints (a segment
// each) is what it was after 10.
TEST(Launch, RankZerosMemoryStaysFlatOverCheckpoints) {
  testing::TempDir dir;
  const std::string pipeline =
      "pipeline:\n  schedule: 1f1b\n  slices: 2\n  stages:\n    - {layers: \"0\"}\n"
      "    - {layers: \"1\"}\n    - {layers: \"2\"}\n";
  const std::string config =
      "model: {name: mlp, widths: [8, 256, 256, 4]}\n"
      "data: {kind: teacher, samples: 4096, seed: 1, hidden: 8}\n"
      "train:\n  minibatch: 16\n  steps: 200\n  optimizer: {kind: adamw, lr: 2.0e-3}\n"
      "  seed: 3\n  log_every: 10\n" +
      pipeline;
  const auto metrics = dir.path() / "m.jsonl";
  // glibc's allocator otherwise raises its mmap threshold as blocks are freed and keeps their
  // later copies on a heap that grows by a few MiB over the first segments (23.8 -> 26.1 MiB
  // on a machine without CUDA's libraries): a fixed threshold and two arenas leave only what
  // is still held, which is what the test is about (a store keeping every hand-over grows by
  // 0.8 MiB a checkpoint here).
  const testing::CommandResult job = testing::run_command(
      "MALLOC_MMAP_THRESHOLD_=65536 MALLOC_ARENA_MAX=2 " + kTandem + " launch -n 3 " +
      dir.write("c.yaml", config).string() + " --checkpoint " + (dir.path() / "ck").string() +
      " --checkpoint-every 1 --quiet --metrics-json " + metrics.string());
  ASSERT_EQ(job.code, 0) << job.output;
  std::map<int, double> resident;  // step -> MiB
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    resident[j.at("step").get<int>()] = j.at("resident_mib").get<double>();
  }
  ASSERT_TRUE(resident.contains(10) && resident.contains(200)) << job.output;
  std::printf("rank 0 resident: %.1f MiB after 10 checkpoints, %.1f MiB after 200\n", resident[10],
              resident[200]);
  EXPECT_LE(resident[200], resident[10] * 1.05);
}

TEST(Launch, BenchRunsASimPlanAcrossProcesses) {
  testing::TempDir dir;
  const std::string sim =
      "pipeline:\n  schedule: 1f1b\n  slices: 4\n  stages:\n"
      "    - {layers: \"0-1\", device: sim}\n    - {layers: \"2-3\", device: sim}\n";
  const testing::CommandResult job = testing::run_command(
      kTandem + " launch -n 2 bench " + dir.write("b.yaml", mlp_config(sim, 6)).string());
  ASSERT_EQ(job.code, 0) << job.output;
  // Rank 0 reports both replicas, each from the process that ran it.
  EXPECT_NE(job.output.find("[rank 0] stage 0 replica 0 (sim)"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("[rank 0] stage 1 replica 0 (sim)"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("[rank 0] 2 processes: each replica waited"), std::string::npos)
      << job.output;
  EXPECT_NE(job.output.find("[rank 1] rank 1: done"), std::string::npos) << job.output;
  // Stages that compute are refused across processes, with the reason.
  const testing::CommandResult cpu = testing::run_command(
      kTandem + " launch -n 2 bench " + dir.write("c.yaml", mlp_config(k1F1B, 4)).string());
  EXPECT_NE(cpu.code, 0);
  EXPECT_NE(cpu.output.find("across processes, tandem bench runs plans on sim stages"),
            std::string::npos)
      << cpu.output;
}

// A sim profile of the 4-layer MLP whose layer 2 forward takes `slow_ms` (the others 1 ms).
std::string sim_profile(double slow_ms) {
  std::string layers;
  for (int l = 0; l < 4; ++l) {
    const double f = l == 2 ? slow_ms : 1.0;
    layers += std::string(l > 0 ? "," : "") + "{\"name\": \"l" + std::to_string(l) +
              "\", \"forward_ms\": " + std::to_string(f) +
              ", \"backward_ms\": 1, \"backward_weight_ms\": 0.5, \"activation_bytes\": 512, "
              "\"parameter_bytes\": 4096, \"memory_bytes\": 0}";
  }
  return "{\"minibatch\": 16, \"layers\": [" + layers + "]}";
}

const std::string kSimThreeStages =
    "pipeline:\n  schedule: 1f1b\n  slices: 2\n  stages:\n"
    "    - {layers: \"0-1\", device: sim}\n    - {layers: \"2\", device: sim}\n"
    "    - {layers: \"3\", device: sim}\n";

// A rank whose kernel never returns (stage 1's forward takes hours on its sim device) ends
// the job within the stall timeout: every rank exits non-zero naming rank 1, its stage and
// the action it runs; the ranks that starve waiting for it are not the ones named.
TEST(Launch, ARankWithAStuckKernelEndsTheJobNamingItsStage) {
  testing::TempDir dir;
  const auto config =
      dir.write("c.yaml", mlp_config(kSimThreeStages, 4) + "cluster: {stall_timeout: 2}\n");
  const auto profile = dir.write("p.json", sim_profile(1e7));
  const auto start = std::chrono::steady_clock::now();
  const testing::CommandResult job =
      testing::run_command("timeout 60 " + kTandem + " launch -n 3 bench " + config.string() +
                           " --profile " + profile.string());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("the job ended %.2f s after it started (stall timeout 2 s)\n", seconds);
  EXPECT_EQ(job.code, 1) << job.output;
  EXPECT_LT(seconds, 2 + 5 + 5) << job.output;  // the timeout, 5 s, and the job's start
  for (int r : {0, 1, 2}) {
    const std::string prefix = "[rank " + std::to_string(r) + "] tandem: error: ";
    const auto at = job.output.find(prefix);
    ASSERT_NE(at, std::string::npos) << job.output;
    const std::string line = job.output.substr(at, job.output.find('\n', at) - at);
    EXPECT_NE(line.find("rank 1"), std::string::npos) << line;
    EXPECT_NE(line.find("stalled"), std::string::npos) << line;
    EXPECT_NE(line.find("stage 1 replica 0: "), std::string::npos) << line;
    EXPECT_EQ(line.find("rank 0 ("), std::string::npos) << line;
    EXPECT_EQ(line.find("rank 2 ("), std::string::npos) << line;
  }
}

// A slow rank that keeps completing actions (each forward of stage 1 takes 0.4 s, the job 3 s
// or more) is never reported, with a stall timeout of 1 s.
TEST(Launch, ASlowButProgressingRankIsNeverReported) {
  testing::TempDir dir;
  const auto config =
      dir.write("c.yaml", mlp_config(kSimThreeStages, 4) + "cluster: {stall_timeout: 1}\n");
  const auto profile = dir.write("p.json", sim_profile(400));
  const testing::CommandResult job =
      testing::run_command("timeout 60 " + kTandem + " launch -n 3 bench " + config.string() +
                           " --profile " + profile.string());
  EXPECT_EQ(job.code, 0) << job.output;
  EXPECT_EQ(job.output.find("stalled"), std::string::npos) << job.output;
}

// Each rank of a launch_local job prints what `script` prints (sh -c), prefixed by its rank.
std::string run_ranks(LaunchOptions o, const std::string& script) {
  o.command = {"/bin/sh", "-c", script};
  std::ostringstream out;
  const LaunchResult result = launch_local(o, out);
  EXPECT_TRUE(result.ok()) << out.str();
  return out.str();
}

// "[rank R] token=T" lines: the token of each rank, by rank.
std::vector<std::string> tokens_in(const std::string& output, int ranks) {
  std::vector<std::string> tokens(static_cast<std::size_t>(ranks));
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    int r = -1;
    char token[128] = {};
    if (std::sscanf(line.c_str(), "[rank %d] token=%127s", &r, token) == 2 && r >= 0 && r < ranks) {
      tokens[static_cast<std::size_t>(r)] = token;
    }
  }
  return tokens;
}

TEST(Launch, TheRanksShareAFreshTokenOfThirtyTwoRandomBytes) {
  LaunchOptions o;
  o.processes = 3;
  const auto first = tokens_in(run_ranks(o, "echo token=$TANDEM_JOB_TOKEN"), 3);
  EXPECT_EQ(first[0].size(), 64u) << first[0];
  EXPECT_EQ(first[0].find_first_not_of("0123456789abcdef"), std::string::npos) << first[0];
  EXPECT_EQ(first[1], first[0]);
  EXPECT_EQ(first[2], first[0]);
  // Each job draws its own.
  const auto second = tokens_in(run_ranks(o, "echo token=$TANDEM_JOB_TOKEN"), 3);
  EXPECT_EQ(second[0].size(), 64u);
  EXPECT_NE(second[0], first[0]);
}

TEST(Launch, AGivenTokenIsTheJobsAndNoTokenFileReachesTheRanks) {
  LaunchOptions o;
  o.processes = 2;
  o.job_token = "given-token";
  // The launcher's own token file (what `tandem launch` read the given token from) would
  // clash with the token in the ranks' environment.
  ::setenv("TANDEM_JOB_TOKEN_FILE", "/some/file", 1);
  const std::string out =
      run_ranks(o, "echo token=$TANDEM_JOB_TOKEN; echo file=${TANDEM_JOB_TOKEN_FILE-unset}");
  ::unsetenv("TANDEM_JOB_TOKEN_FILE");
  EXPECT_EQ(tokens_in(out, 2), (std::vector<std::string>{"given-token", "given-token"})) << out;
  EXPECT_NE(out.find("[rank 1] file=unset"), std::string::npos) << out;
}

// `tandem launch` reads the token the user set as every rank does, and refuses a bad one
// before it starts a rank.
TEST(Launch, TheLauncherRefusesABadTokenFileBeforeStartingRanks) {
  testing::TempDir dir;
  const auto config = dir.write("c.yaml", mlp_config(k1F1B, 4));
  const testing::CommandResult job =
      testing::run_command("env -u TANDEM_JOB_TOKEN TANDEM_JOB_TOKEN_FILE=/dev/zero " + kTandem +
                           " launch -n 2 " + config.string() + " --quiet");
  EXPECT_EQ(job.code, 1) << job.output;
  EXPECT_NE(job.output.find("TANDEM_JOB_TOKEN_FILE='/dev/zero': not a regular file"),
            std::string::npos)
      << job.output;
  EXPECT_EQ(job.output.find("[rank"), std::string::npos) << job.output;
}

// A rank of a job whose master is not on this host, without a token, refuses to start, saying
// how to set one.
TEST(Launch, ARankThatMaySpanHostsWithoutATokenRefusesToStart) {
  testing::TempDir dir;
  const auto config = dir.write("c.yaml", mlp_config(k1F1B, 4));
  const std::string vars =
      "env -u TANDEM_JOB_TOKEN -u TANDEM_JOB_TOKEN_FILE -u TANDEM_ALLOW_NO_TOKEN RANK=1 "
      "WORLD_SIZE=2 MASTER_ADDR=node0 MASTER_PORT=29500 ";
  const testing::CommandResult rank =
      testing::run_command(vars + kTandem + " train " + config.string() + " --quiet");
  EXPECT_EQ(rank.code, 1) << rank.output;
  for (const char* part : {"master 'node0'", "no job token", "TANDEM_JOB_TOKEN=$(openssl rand",
                           "TANDEM_JOB_TOKEN_FILE", "TANDEM_ALLOW_NO_TOKEN=1"}) {
    EXPECT_NE(rank.output.find(part), std::string::npos) << part << " in " << rank.output;
  }
}

// After a rank fails, a rank still running at the end of the grace is ended by the launcher,
// and its exit says so rather than "killed by signal 9": rank 0 ignores SIGTERM (so the
// launcher kills it 5 s later), rank 2 does not.
TEST(Launch, ARankEndedAfterTheGraceIsReportedAsTheLaunchersDoing) {
  testing::TempDir dir;
  LaunchOptions o;
  o.processes = 3;
  o.grace = 200ms;
  o.env = {"READY=" + (dir.path() / "ready").string()};
  // Rank 1 fails once the others are ready (rank 0 ignores SIGTERM, which sleep inherits).
  const std::string script =
      "case $TANDEM_RANK in\n"
      "0) trap '' TERM; touch \"$READY\"0; exec sleep 60;;\n"
      "1) while [ ! -e \"$READY\"0 ] || [ ! -e \"$READY\"2 ]; do sleep 0.05; done; exit 3;;\n"
      "2) touch \"$READY\"2; exec sleep 60;;\n"
      "esac";
  o.command = {"/bin/sh", "-c", script};
  std::ostringstream out;
  const auto start = std::chrono::steady_clock::now();
  const LaunchResult result = launch_local(o, out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 40s) << "the launcher waited for sleep 60";
  ASSERT_EQ(result.ranks.size(), 3u) << out.str();
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.ranks[0].describe(),
            "rank 0 did not exit within the 0.2 s grace after rank 1 failed; tandem launch "
            "killed it");
  EXPECT_EQ(result.ranks[1].describe(), "rank 1 exited with status 3");
  EXPECT_EQ(result.ranks[2].describe(),
            "rank 2 did not exit within the 0.2 s grace after rank 1 failed; tandem launch "
            "terminated it");
  // A rank killed by someone else is still described by its signal.
  EXPECT_EQ((RankExit{4, 128 + 9, std::nullopt}).describe(), "rank 4 was killed by signal 9");
}

TEST(Launch, UsageErrors) {
  EXPECT_EQ(testing::run_command(kTandem + " launch -n 2").code, 2);
  EXPECT_EQ(testing::run_command(kTandem + " launch -n 0 x.yaml").code, 2);
  const testing::CommandResult missing =
      testing::run_command(kTandem + " launch -n 2 /nonexistent/c.yaml");
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_NE(missing.output.find("[rank 1] tandem: error:"), std::string::npos) << missing.output;
}

}  // namespace
// `tandem launch -n N -- PROGRAM ARGS`: any program runs as the ranks, with the job's
// variables and a fresh token; what cannot be is refused naming it.
TEST(Launch, AProgramAfterTwoDashesRunsAsTheRanks) {
  const testing::CommandResult job = testing::run_command(
      kTandem + " launch -n 3 -- sh -c 'echo \"$TANDEM_RANK/$TANDEM_WORLD_SIZE " +
      "$TANDEM_LOCAL_RANK ${#TANDEM_JOB_TOKEN} $TANDEM_MASTER\"'");
  ASSERT_EQ(job.code, 0) << job.output;
  for (int r = 0; r < 3; ++r) {
    const std::string want = "[rank " + std::to_string(r) + "] " + std::to_string(r) + "/3 " +
                             std::to_string(r) + " 64 127.0.0.1:";
    EXPECT_NE(job.output.find(want), std::string::npos) << want << "\n" << job.output;
  }
  const auto refused = [](const std::string& args, int code, const std::string& words) {
    const testing::CommandResult r = testing::run_command(kTandem + " launch " + args);
    EXPECT_EQ(r.code, code) << args << ": " << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << args << ": " << r.output;
  };
  refused("-n 2 --", 2, "give the program the ranks run after --");
  refused("-n 2 -- /nonexistent/program", 1, "cannot start rank 0 (/nonexistent/program)");
  refused("-n 2 --elastic -- true", 2, "--elastic is for `tandem train` jobs");
  refused("-n 2 --grace 1 -- sh -c 'exit $TANDEM_RANK'", 1, "rank 1 exited with status 1");
  // A `--` among a config's arguments is the ranks' (tandem train refuses it there).
  refused("-n 1 missing.yaml -- x", 1, "[rank 0]");
}

// Where `tandem launch`'s own options end and a program begins, for command lines of every
// shape: a `--` only after launch's options marks a program; argc is cut before it.
TEST(Launch, TwoDashesMarkAProgramOnlyAfterLaunchsOwnOptions) {
  const auto split = [](std::vector<std::string> words) {
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    int argc = static_cast<int>(argv.size());
    const std::optional<std::vector<std::string>> program = split_launch_program(argc, argv.data());
    return std::pair(argc, program);
  };
  using Program = std::optional<std::vector<std::string>>;
  EXPECT_EQ(split({"tandem", "launch", "-n", "2", "--", "app", "--x", "--"}),
            std::pair(4, Program(std::vector<std::string>{"app", "--x", "--"})));
  EXPECT_EQ(split({"tandem", "launch", "--grace", "1", "--elastic", "-n", "2", "--"}),
            std::pair(7, Program(std::vector<std::string>{})));
  EXPECT_EQ(split({"tandem", "launch", "-n", "2", "c.yaml", "--", "x"}), std::pair(7, Program()));
  EXPECT_EQ(split({"tandem", "launch", "-n", "--", "app"}), std::pair(5, Program()));
  EXPECT_EQ(split({"tandem", "launch", "-n"}), std::pair(3, Program()));
  EXPECT_EQ(split({"tandem", "train", "--", "app"}), std::pair(4, Program()));
  EXPECT_EQ(split({"tandem", "launch"}), std::pair(2, Program()));
}

}  // namespace tandem::apps
