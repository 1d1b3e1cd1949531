// `tandem train --checkpoint / --resume` and stopping a run: a run stopped and resumed from its
// checkpoint trains exactly what an uninterrupted run trains (bit-identical, every schedule),
// and a diverging loss stops the run at once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/trainer_report.hpp"
#include "models/safetensors.hpp"
#include "runtime/sha256.hpp"
#include "temp_dir.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/session.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

// Dropout and momentum: every piece of state a resume must carry.
const char* kGpt =
    R"(model: {name: gpt, layers: 2, d_model: 16, heads: 2, seq_len: 8, vocab: 8, dropout: 0.1}
data: {kind: markov-text, vocab: 8, samples: 256, seed: 1}
train:
  minibatch: 8
  steps: 8
  optimizer: {kind: adamw, lr: 1.0e-2}
  lr_schedule: {kind: cosine, warmup_steps: 2}
  seed: 3
  log_every: 1
)";

std::string with_pipeline(const std::string& schedule, const std::string& extra = "") {
  return std::string(kGpt) + "pipeline:\n  schedule: " + schedule + "\n" + extra +
         "  stages:\n    - {layers: \"0-2\"}\n    - {layers: \"3-5\"}\n";
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> tail(const std::vector<float>& v, size_t from) {
  return {v.begin() + static_cast<long>(from), v.end()};
}

class FlushResume : public ::testing::TestWithParam<const char*> {};

TEST_P(FlushResume, StopCheckpointResumeEqualsOneRun) {
  TempDir dir;
  const train::Config config =
      train::parse_config(with_pipeline(GetParam(), "  slices: 2\n"), "test.yaml");
  train::Session whole(config);
  const train::TrainSummary all = whole.run();
  ASSERT_EQ(all.losses.size(), 8u);

  // Stopped from the progress callback (another thread than the caller's) after step 3.
  train::Session first(config, train::SessionOptions{.checkpoint_dir = dir.path()});
  const train::TrainSummary a = first.run([&first](const train::StepRecord& r) {
    if (r.step == 3) first.request_stop();
  });
  ASSERT_TRUE(a.stopped);
  ASSERT_GE(a.steps, 3);
  ASSERT_LT(a.steps, 8);
  ASSERT_EQ(a.checkpoints.size(), 1u);
  EXPECT_TRUE(bit_identical(a.losses, {all.losses.begin(), all.losses.begin() + a.steps}));

  train::Session second(config, train::SessionOptions{.resume = dir.path()});
  EXPECT_EQ(second.first_step(), a.steps);
  const train::TrainSummary b = second.run();
  EXPECT_FALSE(b.stopped);
  EXPECT_EQ(b.steps, 8);
  EXPECT_TRUE(bit_identical(b.losses, tail(all.losses, static_cast<size_t>(a.steps))));
  EXPECT_EQ(b.params_fingerprint, all.params_fingerprint);
}

INSTANTIATE_TEST_SUITE_P(Schedules, FlushResume, ::testing::Values("gpipe", "1f1b"));

// PipeDream keeps minibatches in flight across a checkpoint; they are replayed at the weight
// versions they had, so checkpoints change nothing: a run that checkpoints every 3 steps, one
// that does not, and a resume from a checkpoint all train exactly the same.
class AsyncResume : public ::testing::TestWithParam<const char*> {};

TEST_P(AsyncResume, CheckpointsAndResumeEqualOneRun) {
  TempDir dir;
  // 2BW pipelines micro-batches within a batch: at least one per stage.
  const std::string extra = std::string(GetParam()) == "2bw" ? "  slices: 2\n" : "";
  const train::Config config = train::parse_config(with_pipeline(GetParam(), extra), "test.yaml");
  train::Session reference(config);
  const train::TrainSummary all = reference.run();
  ASSERT_EQ(all.losses.size(), 8u);

  train::Session first(
      config, train::SessionOptions{
                  .checkpoint_dir = dir.path(), .checkpoint_every = 3, .checkpoint_keep = 0});
  const train::TrainSummary a = first.run();
  ASSERT_EQ(a.checkpoints.size(), 3u);  // steps 3, 6 and 8
  EXPECT_TRUE(bit_identical(a.losses, all.losses));
  EXPECT_EQ(a.params_fingerprint, all.params_fingerprint);

  // What a run killed after writing the checkpoint at step 3 resumes from.
  const train::Checkpoint at3 = train::read_checkpoint(a.checkpoints.front());
  EXPECT_GT(at3.stages.front().weights.size(), 1u) << "no weight version of the minibatches in "
                                                      "flight was stored";
  train::Session second(config, train::SessionOptions{.resume = a.checkpoints.front()});
  EXPECT_EQ(second.first_step(), 3);
  const train::TrainSummary b = second.run();
  EXPECT_TRUE(bit_identical(b.losses, tail(all.losses, 3)));
  EXPECT_EQ(b.params_fingerprint, all.params_fingerprint);
}

INSTANTIATE_TEST_SUITE_P(Schedules, AsyncResume,
                         ::testing::Values("pipedream", "pipedream-vsync", "2bw"),
                         [](const auto& param_info) {
                           std::string name = std::string("s_") + param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A checkpoint of an asynchronous schedule without the versions its minibatches in flight use
// (written by hand, or by an older Tandem that drained the pipeline) is refused, naming them.
TEST(AsyncResume, RefusesACheckpointWithoutTheVersionsInFlight) {
  TempDir dir;
  const train::Config config = train::parse_config(with_pipeline("pipedream"), "test.yaml");
  train::Session first(config, train::SessionOptions{.steps = 4, .checkpoint_dir = dir.path()});
  const train::TrainSummary a = first.run();
  ASSERT_EQ(a.checkpoints.size(), 1u);
  train::Checkpoint ck = train::read_checkpoint(a.checkpoints.front());
  for (train::StageCheckpoint& st : ck.stages) {
    std::erase_if(st.weights,
                  [&ck](const train::CheckpointWeights& w) { return w.version < ck.step; });
  }
  TempDir stripped;
  const fs::path written = train::write_checkpoint(stripped.path(), ck);
  try {
    train::Session second(config, train::SessionOptions{.resume = written});
    FAIL() << "a checkpoint without the versions in flight was accepted";
  } catch (const train::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 0 holds no weight version 3"), std::string::npos)
        << e.what();
  }
}

// Another model is refused; another plan resumes (tests/train/reshard_test.cpp has the rest).
TEST(Resume, RefusesAnotherModelButNotAnotherPlan) {
  TempDir dir;
  train::Session first(train::parse_config(with_pipeline("1f1b"), "test.yaml"),
                       train::SessionOptions{.steps = 2, .checkpoint_dir = dir.path()});
  first.run();
  std::string other_model = with_pipeline("1f1b");
  other_model.replace(other_model.find("d_model: 16"), 11, "d_model: 32");
  EXPECT_THROW(train::Session(train::parse_config(other_model, "test.yaml"),
                              train::SessionOptions{.resume = dir.path()}),
               train::CheckpointError);
  const std::string other_plan = std::string(kGpt) +
                                 "pipeline:\n  schedule: 1f1b\n  stages:\n"
                                 "    - {layers: \"0-0\"}\n    - {layers: \"1-5\"}\n";
  train::Session resharded(train::parse_config(other_plan, "test.yaml"),
                           train::SessionOptions{.steps = 4, .resume = dir.path()});
  EXPECT_EQ(resharded.first_step(), 2);
  EXPECT_EQ(resharded.run().steps, 4);
  // Nothing left to train.
  EXPECT_THROW(train::Session(train::parse_config(with_pipeline("1f1b"), "test.yaml"),
                              train::SessionOptions{.steps = 2, .resume = dir.path()}),
               train::CheckpointError);
  // Another seed would train other minibatches.
  std::string other_seed = with_pipeline("1f1b");
  other_seed.replace(other_seed.find("seed: 3"), 7, "seed: 4");
  EXPECT_THROW(train::Session(train::parse_config(other_seed, "test.yaml"),
                              train::SessionOptions{.resume = dir.path()}),
               train::CheckpointError);
}

// Pruning follows the run's lineage: run A checkpoints steps 10, 20, 30; run B resumes from
// A's step 10 (another learning rate: other weights) into the same directory and keeps 2. B's
// step 20 replaces A's (same name, abandoned run), and B's checkpoints, not A's newer step 30,
// are what stays: before, keep 2 kept A's step 30 and deleted B's own previous checkpoint.
TEST(Resume, PruningKeepsTheResumedRunsOwnCheckpoints) {
  TempDir dir;
  const fs::path ckpt = dir.path() / "ckpt";
  const train::Config a_config = train::parse_config(with_pipeline("1f1b"), "test.yaml");
  train::Session a(
      a_config,
      train::SessionOptions{
          .steps = 30, .checkpoint_dir = ckpt, .checkpoint_every = 10, .checkpoint_keep = 3});
  a.run();
  const train::CheckpointRef a20 = train::checkpoint_ref(ckpt / "step-00000020");
  const train::CheckpointRef a30 = train::checkpoint_ref(ckpt / "step-00000030");

  std::string b_yaml = with_pipeline("1f1b");
  b_yaml.replace(b_yaml.find("lr: 1.0e-2"), 10, "lr: 2.0e-2");
  train::Session b(train::parse_config(b_yaml, "test.yaml"),
                   train::SessionOptions{.steps = 40,
                                         .checkpoint_dir = ckpt,
                                         .checkpoint_every = 10,
                                         .checkpoint_keep = 2,
                                         .resume = ckpt / "step-00000010"});
  std::vector<std::string> while_at_25;
  const train::TrainSummary s = b.run([&](const train::StepRecord& r) {
    if (r.step != 25) return;
    for (const auto& entry : fs::directory_iterator(ckpt)) {
      if (entry.is_directory()) while_at_25.push_back(entry.path().filename().string());
    }
  });
  std::sort(while_at_25.begin(), while_at_25.end());
  // After B's first checkpoint: B's step 20 and its parent, A's step 10; A's step 30 is gone.
  EXPECT_EQ(while_at_25, (std::vector<std::string>{"step-00000010", "step-00000020"}));
  ASSERT_EQ(s.checkpoints.size(), 3u);
  std::vector<std::string> kept;
  for (const auto& entry : fs::directory_iterator(ckpt)) {
    if (entry.is_directory()) kept.push_back(entry.path().filename().string());
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"step-00000030", "step-00000040"}));
  EXPECT_EQ(*train::latest_checkpoint(ckpt), ckpt / "step-00000040");
  // Both are B's: 40's parent is B's 30, whose parent is B's 20, which is not A's.
  const train::Checkpoint b40 = train::read_checkpoint(ckpt);
  const train::Checkpoint b30 = train::read_checkpoint(ckpt / "step-00000030");
  EXPECT_EQ(b40.parent, train::checkpoint_ref(ckpt / "step-00000030"));
  EXPECT_NE(b30.origin, a30);
  ASSERT_TRUE(b30.parent.has_value());
  EXPECT_EQ(b30.parent->name, "step-00000020");
  EXPECT_NE(*b30.parent, a20);
}

// A loss that is not finite stops the run at once instead of training on.
TEST(Divergence, StopsTheRunEarly) {
  std::string yaml = with_pipeline("pipedream");
  yaml.replace(yaml.find("steps: 8"), 8, "steps: 3000");
  yaml.replace(yaml.find("lr: 1.0e-2"), 10, "lr: 1.0e+30");
  train::Session trainer(train::parse_config(yaml, "test.yaml"));
  int64_t last = 0;
  try {
    trainer.run([&last](const train::StepRecord& r) { last = r.step; });
    FAIL() << "a loss of inf or nan trained on";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("diverged at step"), std::string::npos) << e.what();
  }
  EXPECT_LT(last, 100) << "the run went on after the loss diverged";
}

// Ctrl-C during `tandem train` ends the run at the next stop boundary with a checkpoint to
// resume from, instead of killing the process.
TEST(TrainCommandInterrupt, CtrlCStopsTheRunAndCheckpoints) {
  TempDir dir;
  std::string yaml = with_pipeline("1f1b");
  yaml.replace(yaml.find("steps: 8"), 8, "steps: 1000000");
  const fs::path config = dir.path() / "run.yaml";
  std::ofstream(config) << yaml;
  const fs::path metrics = dir.path() / "metrics.jsonl";
  std::thread interrupter([&metrics] {
    for (;;) {
      std::ifstream in(metrics);
      int lines = 0;
      for (std::string line; std::getline(in, line);) ++lines;
      if (lines >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::raise(SIGINT);
  });
  std::ostringstream out;
  const train::TrainSummary s =
      run_train_command(TrainCommand{.config = config,
                                     .metrics_json = metrics,
                                     .checkpoint_dir = dir.path() / "ckpt",
                                     .quiet = true},
                        out);
  interrupter.join();
  EXPECT_TRUE(s.stopped);
  EXPECT_GE(s.steps, 3);
  EXPECT_LT(s.steps, 1000000);
  ASSERT_EQ(s.checkpoints.size(), 1u);
  EXPECT_EQ(train::read_checkpoint(dir.path() / "ckpt").step, s.steps);
  EXPECT_NE(out.str().find("resume with --resume"), std::string::npos) << out.str();
}

// ---- hostile checkpoints, through the `tandem` executable ----

struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

CliResult tandem_cli(const std::string& args) {
  const std::string command = std::string(TANDEM_CLI) + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  CliResult r;
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) r.output += buffer.data();
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;  // -1: killed by a signal
  return r;
}

std::string file_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string sha256_of(const std::string& text) {
  return sha256_hex(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

// Rewrites stage file `stage` of the checkpoint in `step_dir` through `edit` (its tensors by
// name, in order), then updates the manifest's size, checksum and tensor counts and `latest`'s
// manifest checksum, so that every integrity check passes: checksums detect corruption, not a
// forger.
void forge_stage(const fs::path& step_dir, int stage,
                 const std::function<void(models::ParamSet&)>& edit) {
  const fs::path file = step_dir / ("stage-" + std::to_string(stage) + ".safetensors");
  models::SafetensorsContent content = models::read_safetensors(file);
  edit(content.tensors);
  models::write_safetensors(file, content.tensors, content.metadata);
  const std::string bytes = file_text(file);
  nlohmann::json manifest = nlohmann::json::parse(file_text(step_dir / "manifest.json"));
  nlohmann::json& entry = manifest["stages"][static_cast<size_t>(stage)];
  entry["bytes"] = bytes.size();
  entry["sha256"] = sha256_of(bytes);
  std::int64_t optimizer_tensors = 0;
  for (std::int64_t i = 0; i < content.tensors.size(); ++i) {
    optimizer_tensors += content.tensors.name(i).starts_with("optimizer/r0/") ? 1 : 0;
  }
  entry["optimizer"][0]["tensors"] = optimizer_tensors;
  const std::string text = manifest.dump(2) + "\n";
  std::ofstream(step_dir / "manifest.json", std::ios::binary | std::ios::trunc) << text;
  const nlohmann::json latest = {{"checkpoint", step_dir.filename().string()},
                                 {"manifest_sha256", sha256_of(text)}};
  std::ofstream(step_dir.parent_path() / "latest", std::ios::binary | std::ios::trunc)
      << latest.dump() << "\n";
}

// `set` with entry `name` replaced by `tensor`, or dropped when `tensor` is undefined.
void replace_tensor(models::ParamSet& set, const std::string& name, const Tensor& tensor) {
  models::ParamSet out;
  for (std::int64_t i = 0; i < set.size(); ++i) {
    if (set.name(i) != name) {
      out.add(set.name(i), set[i]);
    } else if (tensor.defined()) {
      out.add(name, tensor);
    }
  }
  set = std::move(out);
}

struct HostileCase {
  const char* what;
  std::function<void(models::ParamSet&, const std::string& param, const Shape& shape)> edit;
  std::string tensor;  // the tensor the error names, with <p> for the parameter
  std::string detail;  // and what it says of it
};

// A checkpoint whose Adam moments do not fit the weights (and whose checksums were updated to
// match) is refused before the optimizer runs over it: exit 1, one "tandem: error:" line naming
// the stage file and the tensor, never a crash (moments smaller than their weights were read
// out of bounds) or a bare C++ exception ("unordered_map::at" for an unpaired moment).
TEST(HostileCheckpoint, AdamMomentsThatDoNotFitAreRefusedNamingTheFileAndTensor) {
  TempDir dir;
  const fs::path config = dir.write("run.yaml", with_pipeline("1f1b"));
  const fs::path written = dir.path() / "written";
  const CliResult first = tandem_cli("train " + config.string() + " --steps 2 --quiet" +
                                     " --checkpoint " + written.string());
  ASSERT_EQ(first.code, 0) << first.output;
  const train::Checkpoint ck = train::read_checkpoint(written);
  // The first weight of stage 0 with more than one element: moments of it are forged.
  std::string param;
  Shape shape;
  for (const train::CheckpointWeights& w : ck.stages[0].weights) {
    for (std::int64_t i = 0; i < w.params.size() && param.empty(); ++i) {
      if (w.params[i].numel() > 1) {
        param = w.params.name(i);
        shape = w.params[i].shape();
      }
    }
  }
  ASSERT_FALSE(param.empty());
  const std::string m = "optimizer/r0/exp_avg." + param;
  const std::string v = "optimizer/r0/exp_avg_sq." + param;
  const std::int64_t numel = shape_numel(shape);
  const std::vector<HostileCase> cases = {
      {"smaller",
       [&](models::ParamSet& t, const std::string&, const Shape&) {
         replace_tensor(t, m, Tensor::zeros({numel - 1}));
       },
       m, "shape [" + std::to_string(numel - 1) + "], but parameter '" + param + "' has shape"},
      {"larger",
       [&](models::ParamSet& t, const std::string&, const Shape&) {
         replace_tensor(t, v, Tensor::zeros({numel * 4}));
       },
       v, "shape [" + std::to_string(numel * 4) + "], but parameter '" + param + "' has shape"},
      {"another dtype",
       [&](models::ParamSet& t, const std::string&, const Shape& s) {
         replace_tensor(t, m, Tensor::zeros(s, DType::bf16));
       },
       m, "dtype bf16, but parameter '" + param + "' is f32"},
      {"unpaired (partner removed)",
       [&](models::ParamSet& t, const std::string&, const Shape&) { replace_tensor(t, v, {}); }, m,
       "has no partner 'exp_avg_sq." + param + "'"},
      {"unpaired (an extra moment)",
       [&](models::ParamSet& t, const std::string&, const Shape& s) {
         t.add("optimizer/r0/exp_avg.ghost", Tensor::zeros(s));
       },
       "optimizer/r0/exp_avg.ghost", "names no parameter ('ghost')"},
      {"both moments of a weight removed",
       [&](models::ParamSet& t, const std::string&, const Shape&) {
         replace_tensor(t, m, {});
         replace_tensor(t, v, {});
       },
       m, "missing"},
  };
  for (const HostileCase& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path forged = dir.path() / "forged";
    fs::remove_all(forged);
    fs::copy(written, forged, fs::copy_options::recursive);
    const fs::path step_dir = *train::latest_checkpoint(forged);
    forge_stage(step_dir, 0, [&](models::ParamSet& t) { c.edit(t, param, shape); });
    const CliResult r =
        tandem_cli("train " + config.string() + " --quiet --resume " + forged.string());
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("tandem: error: ", 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    const std::string file = (step_dir / "stage-0.safetensors").string();
    EXPECT_NE(r.output.find(file + ": tensor '" + c.tensor + "': " + c.detail), std::string::npos)
        << r.output;
    for (const char* leak : {"unordered_map::at", "stoi", "basic_string", "_M_range_check"}) {
      EXPECT_EQ(r.output.find(leak), std::string::npos) << r.output;
    }
  }
}

}  // namespace
}  // namespace tandem::apps

namespace tandem::apps {
namespace {

// A run in bf16 with clipping and accumulation, stopped at a checkpoint: the checkpoint holds
// the f32 masters and the optimizer state, so the resume trains exactly what the uninterrupted
// run trains, and the same checkpoint resumes under f32 too.
TEST(PrecisionResume, ABf16ClippedAccumulatedRunResumesBitForBitAndUnderF32) {
  TempDir dir;
  const std::string mlp =
      "model: {name: mlp, widths: [64, 256, 256, 8]}\n"
      "data: {kind: teacher, samples: 2048, seed: 1, hidden: 8}\n"
      "train:\n  minibatch: 32\n  steps: 8\n  optimizer: {kind: adamw, lr: 1.0e-3}\n"
      "  seed: 0\n  log_every: 1\n  clip_grad_norm: 0.5\n  accumulate: 2\n";
  const std::string pipeline =
      "pipeline:\n  schedule: 1f1b\n  slices: 2\n  stages:\n    - {layers: \"0\"}\n"
      "    - {layers: \"1-2\"}\n";
  const train::Config bf16 =
      train::parse_config(mlp + "  precision: bf16\n" + pipeline, "test.yaml");
  train::Session whole(bf16);
  const train::TrainSummary all = whole.run();

  train::SessionOptions first_half;
  first_half.steps = 4;
  first_half.checkpoint_dir = dir.path();
  train::Session first(bf16, first_half);
  (void)first.run();
  train::Session second(bf16, train::SessionOptions{.resume = dir.path()});
  EXPECT_EQ(second.first_step(), 4);
  const train::TrainSummary b = second.run();
  EXPECT_TRUE(bit_identical(b.losses, tail(all.losses, 4)));
  EXPECT_EQ(b.params_fingerprint, all.params_fingerprint);

  train::Session as_f32(train::parse_config(mlp + pipeline, "test.yaml"),
                        train::SessionOptions{.resume = dir.path()});
  const train::TrainSummary c = as_f32.run();
  EXPECT_EQ(c.steps, 8);
  EXPECT_NE(c.params_fingerprint, all.params_fingerprint);  // f32 products from step 4 on
}

}  // namespace
}  // namespace tandem::apps
