// `tandem checkpoint inspect` and `tandem checkpoint export`, through the executable: what
// inspect prints of a checkpoint (plan, layers per stage, interleaved chunks, versions, sizes,
// parent; as text and JSON), and how export treats its output (refuses an existing file
// without --force, never writes over the checkpoint's own files, reports a broken checkpoint).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "run_command.hpp"
#include "temp_dir.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::run_command;
using testing::TempDir;

const std::string kTandem = TANDEM_CLI;

std::string config(const std::string& pipeline) {
  return "model: {name: mlp, widths: [8, 16, 16, 16, 4]}\n"
         "data: {kind: teacher, samples: 512, seed: 1, hidden: 8}\n"
         "train:\n  minibatch: 16\n  steps: 6\n  optimizer: {kind: adamw, lr: 2.0e-3}\n"
         "  seed: 3\n" +
         pipeline;
}

// PipeDream with a replicated stage: stashed versions and two devices to list.
const std::string kPipeDream =
    "pipeline:\n  schedule: pipedream\n  stages:\n    - {layers: \"0-1\"}\n"
    "    - {layers: \"2-3\", replicas: 2}\n";
const std::string kInterleaved =
    "pipeline:\n  schedule: interleaved\n  chunks: 2\n  slices: 2\n  stages:\n"
    "    - {layers: \"0-1\"}\n    - {layers: \"2-3\"}\n";

// Trains the config with a checkpoint every 2 steps; returns the checkpoint directory.
fs::path trained(const TempDir& dir, const std::string& pipeline) {
  const fs::path cfg = dir.write("c.yaml", config(pipeline));
  const fs::path ck = dir.path() / "ck";
  const CommandResult r = run_command(kTandem + " train " + cfg.string() + " --checkpoint " +
                                      ck.string() + " --checkpoint-every 2 --quiet");
  EXPECT_EQ(r.code, 0) << r.output;
  return ck;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CheckpointCommand, InspectPrintsThePlanStagesVersionsAndSizes) {
  TempDir dir;
  const fs::path ck = trained(dir, kPipeDream);
  const CommandResult r = run_command(kTandem + " checkpoint inspect " + ck.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "step        6\n")) << r.output;
  EXPECT_TRUE(has(r.output, "model       mlp(widths=8-16-16-16-4)\n")) << r.output;
  EXPECT_TRUE(has(r.output, "schedule    pipedream: 2 stages")) << r.output;
  EXPECT_TRUE(has(r.output, "parent      step-00000004 (manifest sha256 ")) << r.output;
  EXPECT_TRUE(has(r.output, "stage 0     layers 0-1, 1 replica (cpu)\n")) << r.output;
  EXPECT_TRUE(has(r.output, "stage 1     layers 2-3, 2 replicas (cpu, cpu)\n")) << r.output;
  EXPECT_TRUE(has(r.output, "weights    replica 0: versions 6 (newest), 5, 4; 4 tensors each"))
      << r.output;
  EXPECT_TRUE(has(r.output, "optimizer  replica 0: 6 steps; 8 tensors")) << r.output;

  const CommandResult j = run_command(kTandem + " checkpoint inspect --json " + ck.string());
  ASSERT_EQ(j.code, 0) << j.output;
  const nlohmann::json out = nlohmann::json::parse(j.output);
  const fs::path step = ck / "step-00000006";
  EXPECT_EQ(out["checkpoint"], step.string());
  EXPECT_EQ(out["stages"][1]["layers"], nlohmann::json::parse("[[2, 4]]"));
  EXPECT_EQ(out["stages"][1]["replicas"].size(), 2u);
  std::uintmax_t bytes = fs::file_size(step / "manifest.json");
  for (int s = 0; s < 2; ++s) {
    const auto stage_bytes = fs::file_size(step / ("stage-" + std::to_string(s) + ".safetensors"));
    EXPECT_EQ(out["stages"][s]["bytes"], stage_bytes);
    bytes += stage_bytes;
  }
  EXPECT_EQ(out["bytes"], bytes);
  EXPECT_TRUE(has(r.output, "total       " + std::to_string(bytes) + " bytes")) << r.output;

  // A step directory directly (the older one kept).
  const CommandResult older =
      run_command(kTandem + " checkpoint inspect " + (ck / "step-00000004").string());
  ASSERT_EQ(older.code, 0) << older.output;
  EXPECT_TRUE(has(older.output, "step        4\n")) << older.output;
  EXPECT_TRUE(has(older.output, "parent      step-00000002 (")) << older.output;
}

// An interleaved stage holds one chunk of layers per round.
TEST(CheckpointCommand, InspectListsEachChunkOfAnInterleavedStage) {
  TempDir dir;
  const fs::path ck = trained(dir, kInterleaved);
  const CommandResult r = run_command(kTandem + " checkpoint inspect " + ck.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "2 chunks per device")) << r.output;
  EXPECT_TRUE(has(r.output, "stage 0     layers 0, 2, 1 replica")) << r.output;
  EXPECT_TRUE(has(r.output, "stage 1     layers 1, 3, 1 replica")) << r.output;
}

TEST(CheckpointCommand, ExportRefusesAnExistingFileWithoutForceAndTheCheckpointsFiles) {
  TempDir dir;
  const fs::path ck = trained(dir, kPipeDream);
  const fs::path out = dir.path() / "model.safetensors";
  const std::string exp = kTandem + " checkpoint export " + ck.string() + " -o " + out.string();
  CommandResult r = run_command(exp);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "exported the weights of step 6 (8 tensors")) << r.output;
  const auto written = fs::last_write_time(out);

  r = run_command(exp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "exists; give --force to replace it")) << r.output;
  EXPECT_EQ(fs::last_write_time(out), written);
  r = run_command(exp + " --force");
  EXPECT_EQ(r.code, 0) << r.output;

  const fs::path stage = ck / "step-00000006" / "stage-1.safetensors";
  const auto size = fs::file_size(stage);
  r = run_command(kTandem + " checkpoint export " + ck.string() + " -o " + stage.string() +
                  " --force");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "is an input of this command")) << r.output;
  EXPECT_EQ(fs::file_size(stage), size);
  EXPECT_EQ(run_command(kTandem + " checkpoint inspect " + ck.string()).code, 0);
}

// Nowhere in the checkpoint, --force or not: not its `latest` (which would leave it without
// its newest step), not an older step's stage file, not a new file beside them, and not from a
// step directory given alone. The checkpoint still resumes after every refusal.
TEST(CheckpointCommand, ExportNeverWritesIntoTheCheckpoint) {
  TempDir dir;
  const fs::path ck = trained(dir, kPipeDream);
  const fs::path older = ck / "step-00000004";
  ASSERT_TRUE(fs::exists(older / "stage-1.safetensors"));
  const auto size = fs::file_size(older / "stage-1.safetensors");
  for (const auto& [from, out] :
       std::vector<std::pair<fs::path, fs::path>>{{ck, ck / "latest"},
                                                  {ck, older / "stage-1.safetensors"},
                                                  {ck, ck / "model.safetensors"},
                                                  {ck, ck / "sub" / ".." / "m.safetensors"},
                                                  {older, ck / "model.safetensors"},
                                                  {older, older / "m.safetensors"}}) {
    const CommandResult r = run_command(kTandem + " checkpoint export " + from.string() + " -o " +
                                        out.string() + " --force");
    EXPECT_EQ(r.code, 2) << out << "\n" << r.output;
    EXPECT_TRUE(has(r.output, "lies in the checkpoint")) << r.output;
    EXPECT_FALSE(fs::exists(ck / "model.safetensors"));
  }
  EXPECT_EQ(fs::file_size(older / "stage-1.safetensors"), size);
  const fs::path cfg = dir.path() / "c.yaml";
  const CommandResult resumed = run_command(kTandem + " train " + cfg.string() + " --resume " +
                                            ck.string() + " --steps 8 --quiet");
  EXPECT_EQ(resumed.code, 0) << resumed.output;
}

TEST(CheckpointCommand, ABrokenCheckpointIsReportedNotExported) {
  TempDir dir;
  const fs::path ck = trained(dir, kPipeDream);
  const fs::path stage = ck / "step-00000006" / "stage-0.safetensors";
  {
    std::fstream f(stage, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  const fs::path out = dir.path() / "model.safetensors";
  for (const std::string& cmd : {" checkpoint inspect " + ck.string(),
                                 " checkpoint export " + ck.string() + " -o " + out.string()}) {
    const CommandResult r = run_command(kTandem + cmd);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_TRUE(has(r.output, "tandem: error: " + stage.string() + ": checksum mismatch"))
        << r.output;
  }
  EXPECT_FALSE(fs::exists(out));
  const CommandResult none = run_command(kTandem + " checkpoint inspect " + dir.path().string());
  EXPECT_EQ(none.code, 1) << none.output;
}

}  // namespace
}  // namespace tandem::apps
