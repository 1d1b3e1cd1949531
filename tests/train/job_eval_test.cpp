// Periodic evaluation (train.eval.every) in a multi-process job, through the executable users
// run: `tandem launch -n 2` reports the same held-out loss and accuracy at the same steps as
// `tandem train` in one process, bit for bit (the same weights reach the same evaluation), for
// a flush schedule, PipeDream, a stage whose replicas span both processes, and a rank 0 that
// runs no stage's replica 0; a job whose checkpoints cut it between evaluation steps and a job
// too short for any periodic evaluation end as the single process does.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "run_command.hpp"
#include "temp_dir.hpp"

namespace tandem::apps {
namespace {

const std::string kTandem = TANDEM_CLI;

// step -> (eval_loss, eval_accuracy) of the metrics file's records that carry an evaluation.
using Evals = std::map<int64_t, std::pair<double, double>>;

Evals read_evals(const std::filesystem::path& metrics) {
  Evals out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("eval_loss")) continue;
    out[j["step"].get<int64_t>()] = {j["eval_loss"].get<double>(), j.value("eval_accuracy", -1.0)};
  }
  return out;
}

// A 4-layer MLP, held-out data evaluated every `every` steps; `pipeline` is the schedule and
// stages part.
std::string config(const std::string& pipeline, int steps, int every) {
  return "model: {name: mlp, widths: [8, 32, 32, 32, 4]}\n"
         "data: {kind: teacher, samples: 4096, seed: 1, hidden: 8}\n"
         "train:\n  minibatch: 16\n  steps: " +
         std::to_string(steps) +
         "\n  optimizer: {kind: adamw, lr: 2.0e-3}\n  seed: 3\n  log_every: 10\n"
         "  eval: {every: " +
         std::to_string(every) + ", samples: 256}\n" + pipeline;
}

const std::string k1F1B =
    "pipeline:\n  schedule: 1f1b\n  slices: 4\n  stages:\n    - {layers: \"0\"}\n"
    "    - {layers: \"1\"}\n    - {layers: \"2\"}\n    - {layers: \"3\"}\n";
const std::string kPipeDream =
    "pipeline:\n  schedule: pipedream\n  stages:\n    - {layers: \"0\"}\n"
    "    - {layers: \"1\"}\n    - {layers: \"2\"}\n    - {layers: \"3\"}\n";

// Runs `job_pipeline` on 2 processes and `one_pipeline` (the same plan, unplaced) in one, with
// `extra` arguments to both, and returns both metrics files' evaluations.
std::pair<Evals, Evals> one_and_two(const testing::TempDir& dir, const std::string& name,
                                    const std::string& one_pipeline,
                                    const std::string& job_pipeline, int steps, int every,
                                    const std::string& extra = "") {
  const auto one_metrics = dir.path() / (name + "-one.jsonl");
  const auto job_metrics = dir.path() / (name + "-job.jsonl");
  const testing::CommandResult one = testing::run_command(
      kTandem + " train " +
      dir.write(name + "-one.yaml", config(one_pipeline, steps, every)).string() +
      " --quiet --metrics-json " + one_metrics.string() + extra);
  EXPECT_EQ(one.code, 0) << one.output;
  const testing::CommandResult job = testing::run_command(
      kTandem + " launch -n 2 " +
      dir.write(name + "-job.yaml", config(job_pipeline, steps, every)).string() +
      " --quiet --metrics-json " + job_metrics.string() + extra);
  EXPECT_EQ(job.code, 0) << job.output;
  return {read_evals(one_metrics), read_evals(job_metrics)};
}

TEST(JobEval, TwoProcessesEvaluateWhatOneProcessEvaluatesAtTheSameSteps) {
  testing::TempDir dir;
  for (const auto& [name, pipeline] :
       {std::pair{"1f1b", k1F1B}, std::pair{"pipedream", kPipeDream}}) {
    const auto [one, job] = one_and_two(dir, name, pipeline, pipeline, 24, 5);
    // Steps 5, 10, 15, 20 and the final evaluation after step 24.
    EXPECT_EQ(one.size(), 5U) << name;
    EXPECT_EQ(job, one) << name;
  }
}

TEST(JobEval, ReplicasAcrossProcessesAndARankZeroWithoutReplicaZero) {
  testing::TempDir dir;
  const std::string local =
      "pipeline:\n  schedule: 1f1b\n  slices: 4\n  stages:\n"
      "    - {layers: \"0-1\", replicas: 2}\n    - {layers: \"2-3\"}\n";
  // Stage 0's replicas on ranks 0 and 1; then only its replica 1 on rank 0, which must still
  // say when its replicas reached each evaluation step.
  for (const std::string ranks : {"[0, 1]", "[1, 0]"}) {
    const std::string placed =
        "pipeline:\n  schedule: 1f1b\n  slices: 4\n  stages:\n"
        "    - {layers: \"0-1\", replicas: 2, ranks: " +
        ranks + "}\n    - {layers: \"2-3\", rank: 1}\n";
    const auto [one, job] = one_and_two(dir, "replicas", local, placed, 12, 4);
    EXPECT_EQ(one.size(), 3U) << ranks;
    EXPECT_EQ(job, one) << ranks;
  }
}

TEST(JobEval, CheckpointSegmentsCutBetweenAndAtEvaluationSteps) {
  testing::TempDir dir;
  for (const auto& [name, pipeline] :
       {std::pair{"1f1b", k1F1B}, std::pair{"pipedream", kPipeDream}}) {
    // Segments of 8 steps; evaluations at 6 (inside the first), 12 (inside the second) and 18.
    for (const int every : {6, 8}) {
      const std::string tag = std::string(name) + "-" + std::to_string(every);
      const auto ck = dir.path() / (tag + "-ck");
      const auto [one, job] = one_and_two(dir, tag, pipeline, pipeline, 24, every,
                                          " --checkpoint " + ck.string() + " --checkpoint-every 8");
      EXPECT_EQ(one.size(), static_cast<size_t>(23 / every + 1)) << tag;
      EXPECT_EQ(job, one) << tag;
    }
  }
}

TEST(JobEval, AJobShorterThanTheEvaluationPeriodEvaluatesOnlyAtTheEnd) {
  testing::TempDir dir;
  const auto [one, job] = one_and_two(dir, "short", k1F1B, k1F1B, 6, 10);
  EXPECT_EQ(one.size(), 1U);
  EXPECT_EQ(job, one);
}

}  // namespace
}  // namespace tandem::apps
