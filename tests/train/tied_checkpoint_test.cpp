// Tied parameters in checkpoints: a stage file stores a tied parameter once (its leader), a
// resume fills every copy a stage needs from the leader's stored weights and optimizer state,
// whichever file holds them, under the same plan (bit for bit) or another one; a file that does
// hold a copy (as written before ties were stored once) reads as it is; one whose leader lacks
// what a copy needs is refused naming both.
#include "train/tied_checkpoint.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "models/safetensors.hpp"
#include "temp_dir.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/model_file.hpp"
#include "train/predict.hpp"
#include "train/resume_state.hpp"
#include "train/session.hpp"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;
using apps::testing::TempDir;

// a and b read the input alike and s sums them, so their own gradients are equal bit for bit and
// so is their sum on any plan, whichever order it is taken in: a run under one plan is what
// another gives, bit for bit. Layers: 0 a, 1 b, 2 s, 3 h, 4 out.
std::string graph(const std::string& pipeline) {
  return R"(model:
  input: {name: x, shape: [6]}
  graph:
    - {name: a, layer: linear, out: 8}
    - {name: b, layer: linear, out: 8, inputs: [x]}
    - {name: s, layer: add, inputs: [a, b]}
    - {name: h, layer: linear, out: 8, activation: relu}
    - {name: out, layer: linear, out: 4}
  tie: [[a.weight, b.weight], [a.bias, b.bias]]
data: {kind: teacher, samples: 1024, seed: 1}
train:
  minibatch: 16
  steps: 20
  optimizer: {kind: adamw, lr: 2.0e-3}
  seed: 3
)" + pipeline;
}

// The leader (layer 0) on stage 0, its copy (layer 1) on stage 1.
const std::string kTwoStages =
    "pipeline:\n  schedule: 1f1b\n  slices: 2\n  stages:\n    - {layers: \"0\"}\n"
    "    - {layers: \"1-4\"}\n";

// A tied GPT of 5 layers: the head's weight "4.weight" is the embedding's "0.tokens".
const char* kGpt =
    R"(model: {name: gpt, layers: 2, d_model: 16, heads: 2, seq_len: 8, vocab: 24, tie_embeddings: true}
data: {kind: markov-text, vocab: 24, samples: 256, seed: 1}
train:
  minibatch: 4
  steps: 6
  optimizer: {kind: adamw, lr: 1.0e-2}
  seed: 3
)";

Config config(const std::string& yaml) {
  return parse_config(yaml, "test.yaml");
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data<float>(), b.data<float>(), a.nbytes()) == 0;
}

void expect_bit_identical(const models::ParamSet& got, const models::ParamSet& want) {
  ASSERT_EQ(got.names(), want.names());
  for (int64_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(same_bits(got[i], want[i])) << want.name(i);
  }
}

// ||got - want|| / ||want|| of every tensor (the resharding tests' measure).
void expect_close(const models::ParamSet& got, const models::ParamSet& want, double relative) {
  ASSERT_EQ(got.names(), want.names());
  for (int64_t i = 0; i < want.size(); ++i) {
    const std::vector<float> a = got[i].to_float_vector();
    const std::vector<float> b = want[i].to_float_vector();
    double diff = 0;
    double norm = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      diff += (double(a[k]) - double(b[k])) * (double(a[k]) - double(b[k]));
      norm += double(b[k]) * double(b[k]);
    }
    EXPECT_LE(std::sqrt(diff), relative * std::sqrt(norm)) << want.name(i);
  }
}

models::ParamSet run_to_end(const std::string& yaml, SessionOptions options = {}) {
  Session s(config(yaml), std::move(options));
  s.run();
  return s.params();
}

// Runs `yaml` for `steps` steps with a checkpoint at the end, into `dir`.
fs::path checkpoint_at(const std::string& yaml, int64_t steps, const fs::path& dir) {
  Session s(config(yaml), SessionOptions{.steps = steps, .checkpoint_dir = dir});
  const TrainSummary summary = s.run();
  EXPECT_EQ(summary.steps, steps);
  return summary.checkpoints.back();
}

std::vector<std::string> tensor_names(const fs::path& file) {
  return models::read_safetensors(file).tensors.names();
}

bool holds(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

ResumeState resume_state(const std::string& yaml, const fs::path& from) {
  const Session session(config(yaml));
  return read_resume_state(from, session.job(), session.model(), session.job().model.describe(),
                           session.plan(), 20);
}

std::string refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(TiedCheckpoint, AStageFileHoldsTheLeaderOnlyAndTheResumeIsBitIdentical) {
  TempDir dir;
  const std::string two = graph(kTwoStages);
  const models::ParamSet whole = run_to_end(two);
  // The copies stayed equal (what the rest of these tests rely on).
  ASSERT_TRUE(same_bits(whole.at("0.weight"), whole.at("1.weight")));

  const fs::path step = checkpoint_at(two, 10, dir.path());
  const std::vector<std::string> leader = tensor_names(step / "stage-0.safetensors");
  const std::vector<std::string> copy = tensor_names(step / "stage-1.safetensors");
  EXPECT_TRUE(holds(leader, "weights/r0/v10/0.weight"));
  EXPECT_TRUE(holds(leader, "optimizer/r0/exp_avg.0.weight"));
  for (const char* name :
       {"weights/r0/v10/1.weight", "weights/r0/v10/1.bias", "optimizer/r0/exp_avg.1.weight",
        "optimizer/r0/exp_avg_sq.1.weight", "optimizer/r0/exp_avg.1.bias"}) {
    EXPECT_FALSE(holds(copy, name)) << name;
  }
  EXPECT_TRUE(holds(copy, "weights/r0/v10/3.weight"));

  const models::ParamSet resumed = run_to_end(two, {.resume = dir.path()});
  expect_bit_identical(resumed, whole);
}

TEST(TiedCheckpoint, AnotherPlanTakesTheCopyFromTheLeadersFile) {
  const std::string one = graph("");
  const std::string two = graph(kTwoStages);
  const models::ParamSet whole = run_to_end(one);

  // Written on one stage, resumed on two: the copy lands on stage 1, away from its leader.
  TempDir a;
  const fs::path step = checkpoint_at(one, 10, a.path());
  EXPECT_FALSE(holds(tensor_names(step / "stage-0.safetensors"), "weights/r0/v10/1.weight"));
  const ResumeState state = resume_state(two, a.path());
  const Checkpoint ck = read_checkpoint(a.path());
  const models::ParamSet& stored = ck.stages[0].weights.back().params;
  EXPECT_TRUE(same_bits(state.params.at("1.weight"), stored.at("0.weight")));
  EXPECT_TRUE(same_bits(state.params.at("1.bias"), stored.at("0.bias")));
  const models::ParamSet& moments = state.optimizer_states[1].state;
  const models::ParamSet& stored_moments = ck.stages[0].optimizers[0].state;
  EXPECT_TRUE(same_bits(moments.at("exp_avg.1.weight"), stored_moments.at("exp_avg.0.weight")));
  EXPECT_TRUE(same_bits(moments.at("exp_avg_sq.1.bias"), stored_moments.at("exp_avg_sq.0.bias")));
  expect_close(run_to_end(two, {.resume = a.path()}), whole, 1e-6);

  // Written on two, resumed on one: stage 1's file lacks the copy, stage 0's file has it.
  TempDir b;
  checkpoint_at(two, 10, b.path());
  expect_close(run_to_end(one, {.resume = b.path()}), whole, 1e-6);
}

// A checkpoint whose files hold every copy (as Tandem wrote them before a tie was stored once)
// resumes as the one holding the leader only.
TEST(TiedCheckpoint, FilesHoldingTheCopiesReadAsTheyAre) {
  TempDir dir;
  const std::string two = graph(kTwoStages);
  checkpoint_at(two, 10, dir.path());
  Checkpoint ck = read_checkpoint(dir.path());
  std::map<int, StageCheckpoint> stages;
  for (size_t s = 0; s < ck.stages.size(); ++s) stages.emplace(int(s), ck.stages[s]);
  const Session session(config(two));
  fill_tied_copies(stages, session.model(), ck.plan,
                   [](int) -> StageCheckpoint { throw std::logic_error("every stage is read"); });
  for (auto& [s, stage] : stages) ck.stages[size_t(s)] = stage;
  ck.parent.reset();
  const fs::path full = dir.path() / "full";
  const fs::path step = write_checkpoint(full, ck);
  EXPECT_TRUE(holds(tensor_names(step / "stage-1.safetensors"), "weights/r0/v10/1.weight"));
  EXPECT_TRUE(holds(tensor_names(step / "stage-1.safetensors"), "optimizer/r0/exp_avg.1.bias"));
  expect_bit_identical(run_to_end(two, {.resume = full}), run_to_end(two, {.resume = dir.path()}));
}

TEST(TiedCheckpoint, ALeaderWithoutWhatTheCopyNeedsIsRefusedNamingBoth) {
  TempDir dir;
  const std::string two = graph(kTwoStages);
  checkpoint_at(two, 10, dir.path());
  const Checkpoint ck = read_checkpoint(dir.path());

  // Stage 0 stores another version than the copy's.
  Checkpoint other_version = ck;
  other_version.parent.reset();
  other_version.stages[0].weights.back().version = 9;
  const fs::path v9 = dir.path() / "v9";
  write_checkpoint(v9, other_version);
  std::string why = refusal([&] { resume_state(two, v9); });
  EXPECT_NE(why.find("stage-1.safetensors: tensor 'weights/r0/v10/1.weight' is missing"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("stage-0.safetensors holds no version 10 of the parameter it is tied to, "
                     "'0.weight'"),
            std::string::npos)
      << why;

  // Stage 0's optimizer took another number of steps.
  Checkpoint other_steps = ck;
  other_steps.parent.reset();
  other_steps.stages[0].optimizers[0].steps = 9;
  const fs::path s9 = dir.path() / "s9";
  write_checkpoint(s9, other_steps);
  why = refusal([&] { resume_state(two, s9); });
  EXPECT_NE(why.find("optimizer state 'exp_avg.1.weight' is missing"), std::string::npos) << why;
  EXPECT_NE(why.find("took 9 steps, not 10"), std::string::npos) << why;

  // The leader's tensor is of another shape: named in its own file, not as the copy.
  Checkpoint other_shape = ck;
  other_shape.parent.reset();
  models::ParamSet& newest = other_shape.stages[0].weights.back().params;
  newest.at("0.weight") = Tensor::zeros({3, 6});
  const fs::path bad = dir.path() / "bad";
  write_checkpoint(bad, other_shape);
  why = refusal([&] { resume_state(two, bad); });
  EXPECT_NE(why.find("stage-0.safetensors: tensor 'weights/r0/v10/0.weight': f32[3, 6], but the "
                     "model's parameter is f32[8, 6]"),
            std::string::npos)
      << why;
}

// The model's description carries its ties: a checkpoint of the tied model does not resume the
// untied one, nor the other way round.
TEST(TiedCheckpoint, ACheckpointResumesOnlyTheModelWithTheSameTies) {
  TempDir tied;
  TempDir plain;
  std::string untied = graph("");
  untied.erase(untied.find("  tie: "), untied.find("data:") - untied.find("  tie: "));
  checkpoint_at(graph(""), 10, tied.path());
  checkpoint_at(untied, 10, plain.path());
  EXPECT_NE(refusal([&] { resume_state(untied, tied.path()); }).find("checkpoint of another model"),
            std::string::npos);
  EXPECT_NE(refusal([&] { resume_state(graph(""), plain.path()); }).find("tie=0.weight=1.weight"),
            std::string::npos);
  expect_close(run_to_end(untied, {.resume = plain.path()}), run_to_end(untied), 0);
}

// What leaves a checkpoint as a whole model (export, predict) has every copy from its leader.
TEST(TiedCheckpoint, ExportAndPredictFillTheCopies) {
  TempDir dir;
  const std::string two = graph(kTwoStages);
  checkpoint_at(two, 10, dir.path());
  const Session session(config(two));
  const std::string name = session.job().model.describe();
  const Checkpoint ck = read_checkpoint(dir.path());
  const models::ParamSet exported = newest_weights(ck);
  EXPECT_FALSE(exported.contains("1.weight"));  // the file `checkpoint export` writes
  const fs::path file = dir.path() / "model.safetensors";
  write_model_file(file, exported, {name, ck.step, ck.origin.name});
  const models::ParamSet read = read_model_file(file, session.model(), name);
  EXPECT_TRUE(same_bits(read.at("1.weight"), read.at("0.weight")));
  const models::ParamSet served = load_predict_weights(dir.path(), session.model(), name);
  expect_bit_identical(served, read);
}

// A GPT with tie_embeddings on one process: the embedding is stored once, its optimizer state
// too, and the run resumed from step 3 ends where the uninterrupted run ends.
TEST(TiedCheckpoint, TiedGptStoresTheEmbeddingOnceAndResumesBitForBit) {
  TempDir dir;
  const fs::path step = checkpoint_at(kGpt, 3, dir.path());
  const std::vector<std::string> names = tensor_names(step / "stage-0.safetensors");
  EXPECT_TRUE(holds(names, "weights/r0/v3/0.tokens"));
  EXPECT_TRUE(holds(names, "optimizer/r0/exp_avg.0.tokens"));
  EXPECT_FALSE(holds(names, "weights/r0/v3/4.weight"));
  EXPECT_FALSE(holds(names, "optimizer/r0/exp_avg.4.weight"));
  EXPECT_FALSE(holds(names, "optimizer/r0/exp_avg_sq.4.weight"));
  EXPECT_TRUE(holds(names, "weights/r0/v3/4.bias"));  // untied

  Session resumed(config(kGpt), {.resume = dir.path()});
  EXPECT_TRUE(same_bits(resumed.params().at("4.weight"), resumed.params().at("0.tokens")));
  resumed.run();
  const models::ParamSet whole = run_to_end(kGpt);
  // The stages sum the copies' gradients, so the uninterrupted run's copies never drift apart and
  // a resume that fills the copy from the leader continues it bit for bit.
  ASSERT_TRUE(same_bits(whole.at("4.weight"), whole.at("0.tokens")));
  expect_bit_identical(resumed.params(), whole);
}

}  // namespace
}  // namespace tandem::train
