// A checkpoint resumes under another plan: flush schedules exactly, PipeDream's stashed
// versions mapped or, where they cannot be, a fresh start said in one line; another model or
// optimizer refused naming both; a process needing some stages reads only their files.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "temp_dir.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/resume_state.hpp"
#include "train/session.hpp"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;
using apps::testing::TempDir;

// Six layers, so that 4-stage and 3-stage cuts have one to two layers a stage.
std::string mlp(const std::string& optimizer, const std::string& pipeline) {
  return "model: {name: mlp, widths: [8, 24, 24, 24, 24, 24, 4]}\n"
         "data: {kind: teacher, samples: 4096, seed: 1, hidden: 8}\n"
         "train:\n"
         "  minibatch: 16\n"
         "  steps: 40\n"
         "  optimizer: " +
         optimizer +
         "\n"
         "  seed: 3\n"
         "  log_every: 10\n" +
         pipeline;
}

const std::string kSgd = "{kind: sgd, lr: 5.0e-2, momentum: 0.9}";
const std::string kAdam = "{kind: adamw, lr: 2.0e-3}";

std::string stages(const std::string& schedule, const std::vector<std::string>& cut,
                   const std::string& extra = "") {
  std::string out = "pipeline:\n  schedule: " + schedule + "\n" + extra + "  stages:\n";
  for (const std::string& s : cut) out += "    - {" + s + "}\n";
  return out;
}

Config config(const std::string& yaml) {
  return parse_config(yaml, "test.yaml");
}

// Runs `yaml` to `steps`, checkpointing into `dir` at the end; returns the step directory.
fs::path checkpoint_at(const std::string& yaml, int64_t steps, const fs::path& dir) {
  Session run(config(yaml), SessionOptions{.steps = steps, .checkpoint_dir = dir});
  const TrainSummary s = run.run();
  EXPECT_EQ(s.steps, steps);
  EXPECT_FALSE(s.checkpoints.empty());
  return s.checkpoints.back();
}

// read_resume_state as a Session of `yaml` calls it, for the stages `needs` names.
ResumeState resume_state(const std::string& yaml, const fs::path& from, int64_t steps = 40,
                         const std::function<bool(int)>& needs = {}) {
  const Session session(config(yaml));
  return read_resume_state(from, session.job(), session.model(), session.job().model.describe(),
                           session.plan(), steps, needs);
}

// ||got - want|| / ||want|| of every tensor, by name.
void expect_close(const models::ParamSet& got, const models::ParamSet& want, double relative) {
  ASSERT_EQ(got.names(), want.names());
  for (int64_t i = 0; i < want.size(); ++i) {
    const std::vector<float> a = got[i].to_float_vector();
    const std::vector<float> b = want[i].to_float_vector();
    ASSERT_EQ(a.size(), b.size()) << want.name(i);
    double diff = 0;
    double norm = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      diff += (double(a[k]) - double(b[k])) * (double(a[k]) - double(b[k]));
      norm += double(b[k]) * double(b[k]);
    }
    EXPECT_LE(std::sqrt(diff), relative * std::sqrt(norm)) << want.name(i);
  }
}

// The names in `params` of layers [begin, end).
std::vector<std::string> layer_names(const models::ParamSet& params, int begin, int end) {
  std::vector<std::string> out;
  for (const std::string& name : params.names()) {
    const int layer = std::stoi(name.substr(0, name.find('.')));
    if (layer >= begin && layer < end) out.push_back(name);
  }
  return out;
}

std::string refusal(const std::function<void()>& resume) {
  try {
    resume();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  ADD_FAILURE() << "the resume was accepted";
  return "";
}

const std::vector<std::string> kFourStages = {"layers: \"0-1\"", "layers: \"2\"", "layers: \"3\"",
                                              "layers: \"4-5\""};
const std::vector<std::string> kTwoStagesReplicated = {"layers: \"0-2\", replicas: 2",
                                                       "layers: \"3-5\""};

// Flush schedules hold only weights and optimizer state at a checkpoint: laid out on another
// cut, other replicas and another schedule they are the same numbers, so the run ends where an
// uninterrupted run on one device ends (up to the order of float sums over slices).
TEST(Reshard, FlushScheduleResumesExactlyUnderAnotherPlan) {
  TempDir dir;
  const std::string one_device = mlp(kSgd, "");
  Session whole(config(one_device));
  whole.run();

  const std::string four = mlp(kSgd, stages("1f1b", kFourStages, "  slices: 4\n"));
  checkpoint_at(four, 20, dir.path());
  const std::string two = mlp(kSgd, stages("gpipe", kTwoStagesReplicated, "  slices: 4\n"));
  const ResumeState state = resume_state(two, dir.path());
  EXPECT_EQ(state.reshard_note,
            "resharded from 4-stage 1f1b [0-1|2|3|4-5] to 2-stage gpipe [0-2 x2|3-5]: weights "
            "and optimizer state laid out anew, exact");
  ASSERT_EQ(state.optimizer_states.size(), 2u);
  EXPECT_EQ(state.optimizer_states[0].steps, 20);
  // A momentum buffer for each parameter of layers 0-2.
  EXPECT_EQ(state.optimizer_states[0].state.size(),
            static_cast<int64_t>(layer_names(state.params, 0, 3).size()));

  Session resumed(config(two), SessionOptions{.resume = dir.path()});
  EXPECT_EQ(resumed.first_step(), 20);
  EXPECT_EQ(resumed.run().steps, 40);
  expect_close(resumed.params(), whole.params(), 1e-6);
}

// An interleaved stage's file holds its chunks (2 stages x 2 chunks of 6 layers,
// schedules::virtual_stage_layers: stage 0 holds layers 0 and 3, stage 1 layers 1-2 and 4-5);
// laid out as 3 contiguous stages they resume exactly.
TEST(Reshard, InterleavedChunksResumeExactlyAsContiguousStages) {
  TempDir dir;
  Session whole(config(mlp(kSgd, "")));
  whole.run();
  const std::string interleaved =
      mlp(kSgd, stages("interleaved", {"layers: \"0-2\"", "layers: \"3-5\""}, "  slices: 2\n"));
  checkpoint_at(interleaved, 20, dir.path());
  const std::string three =
      mlp(kSgd, stages("1f1b", {"layers: \"0-1\"", "layers: \"2-3\"", "layers: \"4-5\""}));
  EXPECT_EQ(resume_state(three, dir.path()).reshard_note,
            "resharded from 2-stage interleaved [0,3|1-2,4-5] to 3-stage 1f1b [0-1|2-3|4-5]: "
            "weights and optimizer state laid out anew, exact");
  Session resumed(config(three), SessionOptions{.resume = dir.path()});
  EXPECT_EQ(resumed.run().steps, 40);
  expect_close(resumed.params(), whole.params(), 1e-6);
}

// 3-stage PipeDream at step 30 keeps versions 28-30 on stage 0, 29-30 on stage 1 and 30 on
// stage 2 (stage s stashes p - 1 - s). The 2-stage plan's stage 0 replays minibatch 30 at v29
// and trains v30, its stage 1 needs only v30: every layer's old stage holds those, and all
// optimizers took 30 steps, so the versions map exactly.
TEST(Reshard, PipeDreamToFewerStagesMapsTheStashedVersions) {
  TempDir dir;
  const std::string three =
      mlp(kAdam, stages("pipedream", {"layers: \"0-1\"", "layers: \"2-3\"", "layers: \"4-5\""}));
  checkpoint_at(three, 30, dir.path());
  const std::string two = mlp(kAdam, stages("pipedream", {"layers: \"0-2\"", "layers: \"3-5\""}));
  const ResumeState state = resume_state(two, dir.path());
  EXPECT_EQ(state.reshard_note,
            "resharded from 3-stage pipedream [0-1|2-3|4-5] to 2-stage pipedream [0-2|3-5]: "
            "stashed versions mapped exactly");
  ASSERT_EQ(state.older_versions.size(), 2u);
  ASSERT_EQ(state.older_versions[0].size(), 1u);
  EXPECT_EQ(state.older_versions[0].begin()->first, 29);
  EXPECT_TRUE(state.older_versions[1].empty());
  // v29 of layer 2 is old stage 1's stashed version, not its newest weights.
  const Checkpoint ck = read_checkpoint(dir.path());
  const models::ParamSet& v29 = state.older_versions[0].at(29);
  for (const CheckpointWeights& w : ck.stages[1].weights) {
    if (w.version != 29) continue;
    const std::vector<std::string> layer_2 = layer_names(w.params, 2, 3);
    expect_close(v29.subset(layer_2), w.params.subset(layer_2), 0);
  }
  EXPECT_EQ(state.optimizer_states[0].steps, 30);
  // Two moments for each parameter of layers 0-2, from old stages 0 and 1.
  EXPECT_EQ(state.optimizer_states[0].state.size(),
            2 * static_cast<int64_t>(layer_names(state.params, 0, 3).size()));

  const fs::path next = dir.path() / "next";
  Session resumed(config(two), SessionOptions{.checkpoint_dir = next, .resume = dir.path()});
  const TrainSummary s = resumed.run();
  EXPECT_EQ(s.steps, 40);
  ASSERT_FALSE(s.losses.empty());
  EXPECT_TRUE(std::isfinite(s.losses.back()));
  // The resumed run's checkpoints say what happened to the stashed versions.
  EXPECT_EQ(read_checkpoint(next).history,
            std::vector<std::string>{"step 30: " + state.reshard_note});
}

// The other way, 2 stages to 3: the new stage 0 replays minibatch 30 at v28, which no old stage
// kept (old stage 0 stashed only v29): a fresh start, every older version a copy of the newest.
TEST(Reshard, PipeDreamToMoreStagesIsAFreshStartSaidInOneLine) {
  TempDir dir;
  const std::string two = mlp(kAdam, stages("pipedream", {"layers: \"0-2\"", "layers: \"3-5\""}));
  checkpoint_at(two, 30, dir.path());
  const std::string three =
      mlp(kAdam, stages("pipedream", {"layers: \"0-1\"", "layers: \"2-3\"", "layers: \"4-5\""}));
  const ResumeState state = resume_state(three, dir.path());
  EXPECT_EQ(state.reshard_note,
            "resharded from 2-stage pipedream [0-2|3-5] to 3-stage pipedream [0-1|2-3|4-5]: "
            "versions not mappable (stage 0 needs v28, layer 0 holds v29-v30): fresh start of "
            "pipedream from the newest weights");
  ASSERT_EQ(state.older_versions[0].size(), 2u);
  for (const auto& [version, params] : state.older_versions[0]) {
    expect_close(params, state.params.subset(params.names()), 0);
  }
  EXPECT_EQ(state.optimizer_states[2].steps, 30);

  const fs::path next = dir.path() / "next";
  Session resumed(config(three), SessionOptions{.checkpoint_dir = next, .resume = dir.path()});
  const TrainSummary s = resumed.run();
  EXPECT_EQ(s.steps, 40);
  EXPECT_TRUE(std::isfinite(s.losses.back()));
  EXPECT_EQ(read_checkpoint(next).history,
            std::vector<std::string>{"step 30: " + state.reshard_note});
}

TEST(Reshard, AnotherScheduleKindOfAnAsynchronousCheckpointIsAFreshStart) {
  TempDir dir;
  checkpoint_at(mlp(kAdam, stages("pipedream", {"layers: \"0-2\"", "layers: \"3-5\""})), 10,
                dir.path());
  const std::string gpipe = mlp(kAdam, stages("gpipe", {"layers: \"0-2\"", "layers: \"3-5\""}));
  EXPECT_EQ(resume_state(gpipe, dir.path()).reshard_note,
            "resharded from 2-stage pipedream [0-2|3-5] to 2-stage gpipe [0-2|3-5]: the schedule "
            "changes from pipedream: fresh start of gpipe from the newest weights");
  Session resumed(config(gpipe), SessionOptions{.steps = 12, .resume = dir.path()});
  EXPECT_EQ(resumed.run().steps, 12);
}

TEST(Reshard, TheSamePlanSaysNothing) {
  TempDir dir;
  const std::string four = mlp(kSgd, stages("1f1b", kFourStages));
  checkpoint_at(four, 4, dir.path());
  EXPECT_EQ(resume_state(four, dir.path()).reshard_note, "");
}

TEST(Reshard, RefusesAStepThatIsNoStopBoundaryOfTheNewSchedule) {
  TempDir dir;
  checkpoint_at(mlp(kAdam, stages("1f1b", kFourStages)), 3, dir.path());
  const std::string replicated =
      mlp(kAdam, stages("pipedream", {"layers: \"0-2\", replicas: 2", "layers: \"3-5\""}));
  EXPECT_NE(refusal([&] { resume_state(replicated, dir.path()); })
                .find("step 3 (written by a 1f1b run of 4 stages) is not a stop boundary of this "
                      "run's pipedream schedule of 2 stages (the next is step 4)"),
            std::string::npos);
}

TEST(Reshard, RefusesAnotherModelOrOptimizerNamingBoth) {
  TempDir dir;
  const std::string four = mlp(kSgd, stages("1f1b", kFourStages));
  checkpoint_at(four, 4, dir.path());
  std::string wider = four;
  wider.replace(wider.find("24, 4]"), 6, "32, 4]");
  const std::string what =
      refusal([&] { Session(config(wider), SessionOptions{.resume = dir.path()}); });
  EXPECT_NE(what.find("checkpoint of another model: '" + config(four).model.describe() +
                      "', this run trains '" + config(wider).model.describe() + "'"),
            std::string::npos)
      << what;
  EXPECT_NE(refusal([&] {
              Session(config(mlp(kAdam, stages("1f1b", kFourStages))),
                      SessionOptions{.resume = dir.path()});
            }).find("checkpoint of another optimizer: 'sgd', this run uses 'adamw'"),
            std::string::npos);
}

// Flips bits of a byte near the end of `file` (in the tensors, past the header).
void corrupt(const fs::path& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-3, std::ios::end);
  const int byte = f.get();
  f.seekp(-3, std::ios::end);
  f.put(static_cast<char>(byte ^ 0x10));
}

// A process resuming stage 0 of [0-2 x2 | 3-5] from [0-1 | 2 | 3 | 4-5] reads old stages 0 and 1
// only: the others' files may be gone or corrupted; a corrupted file it needs is named.
TEST(Reshard, ReadsOnlyTheStageFilesTheNeededStagesHold) {
  TempDir dir;
  const fs::path step_dir = checkpoint_at(mlp(kSgd, stages("1f1b", kFourStages)), 4, dir.path());
  const std::string two = mlp(kSgd, stages("gpipe", kTwoStagesReplicated, "  slices: 4\n"));
  const ResumeState all = resume_state(two, dir.path());
  fs::remove(step_dir / "stage-3.safetensors");
  corrupt(step_dir / "stage-2.safetensors");

  const auto stage0 = [](int s) { return s == 0; };
  const ResumeState part = resume_state(two, dir.path(), 40, stage0);
  expect_close(part.params, all.params.subset(layer_names(all.params, 0, 3)), 0);
  EXPECT_EQ(part.optimizer_states[0].state.size(), all.optimizer_states[0].state.size());
  EXPECT_TRUE(part.optimizer_states[1].state.empty());

  const std::string needs_1 =
      refusal([&] { resume_state(two, dir.path(), 40, [](int s) { return s == 1; }); });
  EXPECT_NE(needs_1.find((step_dir / "stage-2.safetensors").string() + ": checksum mismatch"),
            std::string::npos)
      << needs_1;
  corrupt(step_dir / "stage-1.safetensors");
  const std::string needs_0 = refusal([&] { resume_state(two, dir.path(), 40, stage0); });
  EXPECT_NE(needs_0.find((step_dir / "stage-1.safetensors").string() + ": checksum mismatch"),
            std::string::npos)
      << needs_0;
}

}  // namespace
}  // namespace tandem::train
