// Which rank runs each endpoint of a pipeline: the config's rank/ranks keys and the default
// rule, and the errors at the config's keys.
#include "train/process_placement.hpp"

#include <gtest/gtest.h>

#include "train/config.hpp"
#include "train/config_error.hpp"
#include "train/job_plan.hpp"
#include "train/session.hpp"

namespace tandem::apps {
namespace {

train::Config config_with(const std::string& stages, const std::string& extra = "") {
  return train::parse_config(
      "model: {name: mlp, widths: [8, 16, 16, 16, 4]}\n"
      "data: {kind: teacher, samples: 256, seed: 1}\n"
      "train: {minibatch: 8, steps: 4, optimizer: {kind: sgd, lr: 0.1}}\n"
      "pipeline:\n  schedule: 1f1b\n  stages:\n" +
          stages + extra,
      "c.yaml");
}

schedules::Plan plan_of(const train::Config& c) {
  return train::pipeline_plan(*c.pipeline, c.train.minibatch, 4, c.train.steps);
}

const std::string kFour =
    "    - {layers: \"0\"}\n    - {layers: \"1\"}\n    - {layers: \"2\"}\n    - {layers: \"3\"}\n";

TEST(ProcessPlacement, DefaultCutsTheReplicasIntoContiguousRuns) {
  const train::Config c = config_with(kFour);
  const train::ProcessPlacement two(c, plan_of(c), 2);
  EXPECT_EQ(two.rank_of(0), 0);
  EXPECT_EQ(two.rank_of(1), 0);
  EXPECT_EQ(two.rank_of(2), 1);
  EXPECT_EQ(two.rank_of(3), 1);
  EXPECT_EQ(two.rank_of(4), 0);  // the loader
  EXPECT_EQ(two.rank_of(5), 0);  // the coordinator
  EXPECT_EQ(two.describe(0), "stages 0-1");
  EXPECT_EQ(two.describe(1), "stages 2-3");
  EXPECT_FALSE(two.replicas_span_processes());
  const train::ProcessPlacement three(c, plan_of(c), 3);
  EXPECT_EQ(three.describe(0), "stages 0-1");
  EXPECT_EQ(three.describe(1), "stage 2");
  EXPECT_EQ(three.describe(2), "stage 3");
  const train::ProcessPlacement one(c, plan_of(c), 1);
  EXPECT_EQ(one.describe(0), "stages 0-3");
}

TEST(ProcessPlacement, RanksFromTheConfig) {
  const train::Config c = config_with(
      "    - {layers: \"0-1\", replicas: 2, ranks: [1, 0]}\n    - {layers: \"2-3\", rank: 1}\n");
  ASSERT_EQ(c.pipeline->stages[0].ranks, (std::vector<int64_t>{1, 0}));
  ASSERT_EQ(c.pipeline->stages[1].ranks, (std::vector<int64_t>{1}));
  const train::ProcessPlacement p(c, plan_of(c), 2);
  EXPECT_EQ(p.rank_of(0), 1);
  EXPECT_EQ(p.rank_of(1), 0);
  EXPECT_EQ(p.rank_of(2), 1);
  EXPECT_TRUE(p.replicas_span_processes());
  EXPECT_EQ(p.describe(1), "stages 0-1");
  EXPECT_EQ(p.describe(0), "stage 0");
}

void expect_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << what;
  } catch (const train::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(ProcessPlacement, Errors) {
  expect_error([] { config_with("    - {layers: \"0-1\", rank: 0}\n    - {layers: \"2-3\"}\n"); },
               "place every stage (rank or ranks) or none");
  expect_error(
      [] {
        config_with(
            "    - {layers: \"0-1\", replicas: 2, ranks: [0]}\n"
            "    - {layers: \"2-3\", rank: 0}\n");
      },
      "gives 1 ranks for 2 replicas");
  expect_error(
      [] { config_with("    - {layers: \"0-1\", rank: -1}\n    - {layers: \"2-3\", rank: 0}\n"); },
      "a rank is 0-65535, got -1");
  expect_error(
      [] {
        config_with(
            "    - {layers: \"0-1\", rank: 0, ranks: [0]}\n    - {layers: \"2-3\", rank: 0}\n");
      },
      "give rank (all replicas) or ranks, not both");
  expect_error(
      [] { config_with(kFour, "cluster: {transport: carrier-pigeon}\n"); },
      "cluster.transport: unknown transport 'carrier-pigeon' (expected auto, tcp, ucx, cuda-ipc)");
  {
    const train::Config c =
        config_with("    - {layers: \"0-1\", rank: 0}\n    - {layers: \"2-3\", rank: 3}\n");
    expect_error([&] { train::at_config(c, [&] { train::ProcessPlacement(c, plan_of(c), 2); }); },
                 "c.yaml:8:7: pipeline.stages[1].ranks: replica 0 is placed on rank 3, but the job "
                 "has 2 processes (ranks 0-1)");
  }
  {
    const train::Config c =
        config_with("    - {layers: \"0-1\", rank: 0}\n    - {layers: \"2-3\", rank: 0}\n");
    expect_error([&] { train::at_config(c, [&] { train::ProcessPlacement(c, plan_of(c), 2); }); },
                 "rank 1 of the 2 processes runs no stage replica");
  }
  {
    const train::Config c = config_with("    - {layers: \"0-1\"}\n    - {layers: \"2-3\"}\n");
    expect_error([&] { train::at_config(c, [&] { train::ProcessPlacement(c, plan_of(c), 3); }); },
                 "the plan has 2 stage replicas for 3 processes");
  }
  EXPECT_EQ(config_with(kFour, "cluster: {transport: tcp}\n").cluster.transport, "tcp");
  EXPECT_EQ(config_with(kFour).cluster.transport, "auto");
}

}  // namespace
}  // namespace tandem::apps
