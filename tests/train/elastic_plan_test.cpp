// The plan an elastic job continues under (train/elastic_plan.hpp): the layers cut evenly into
// one stage per rank, the schedule kept, and a plan whose stages cannot fit a rank refused.
#include "train/elastic_plan.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "train/config.hpp"
#include "train/job_error.hpp"
#include "train/job_plan.hpp"

namespace tandem::train {
namespace {

Config config(const std::string& pipeline) {
  return parse_config(
      "model: {name: mlp, widths: [8, 64, 64, 64, 64, 64, 4]}\n"
      "data: {kind: teacher, samples: 256, seed: 1, hidden: 8}\n"
      "train: {minibatch: 16, steps: 10, optimizer: {kind: adamw, lr: 1.0e-3}}\n" +
          pipeline,
      "test.yaml");
}

const std::string kFour =
    "pipeline:\n  schedule: gpipe\n  slices: 2\n  stages:\n    - {layers: \"0-1\", rank: 0}\n"
    "    - {layers: \"2\", rank: 1}\n    - {layers: \"3-4\", rank: 2}\n"
    "    - {layers: \"5\", replicas: 2, ranks: [3, 3]}\n";

std::string cut(const JobSpec& job, int layers) {
  return describe_cut(pipeline_plan(*job.pipeline, job.train.minibatch, layers, 1));
}

TEST(ElasticPlan, CutsTheLayersEvenlyIntoOneStagePerRank) {
  const Config c = config(kFour);
  EXPECT_EQ(cut(replan_job(c, 6, 3), 6), "0-1 | 2-3 | 4-5");
  EXPECT_EQ(cut(replan_job(c, 6, 4), 6), "0 | 1-2 | 3 | 4-5");
  EXPECT_EQ(cut(replan_job(c, 6, 1), 6), "0-5");
  // More ranks than layers: a layer a stage.
  EXPECT_EQ(replan_job(c, 6, 9).pipeline->stages.size(), 6u);
  const JobSpec three = replan_job(c, 6, 3);
  EXPECT_EQ(three.pipeline->schedule, "gpipe");
  EXPECT_EQ(three.pipeline->slices, std::vector<int64_t>{2});
  for (const StageSpec& st : three.pipeline->stages) {
    EXPECT_EQ(st.replicas, 1);
    EXPECT_TRUE(st.ranks.empty());  // placed by the default rule: a stage a rank
  }
}

TEST(ElasticPlan, InterleavedStagesKeepAtLeastALayerPerChunk) {
  const Config c = config(
      "pipeline:\n  schedule: interleaved\n  chunks: 2\n  slices: 4\n  stages:\n"
      "    - {layers: \"0-2\"}\n    - {layers: \"3-5\"}\n");
  EXPECT_EQ(replan_job(c, 6, 5).pipeline->stages.size(), 3u);
}

TEST(ElasticPlan, RefusesUmpipeCompositionsOfTheOldCut) {
  const Config c = config(
      "pipeline:\n  schedule: umpipe\n"
      "  slices: [{forward: [8, 8], backward: [16]}, {forward: [16], backward: [8, 8]}]\n"
      "  stages:\n    - {layers: \"0-2\"}\n    - {layers: \"3-5\"}\n");
  EXPECT_THROW(replan_job(c, 6, 3), JobError);
}

// 64 x 64 layers under AdamW: 16 bytes a parameter (weights, gradients, two moments).
TEST(ElasticPlan, APlanWhoseStageCannotFitARankIsRefusedNamingIt) {
  const Config c = config(kFour);
  const models::Model model = models::Model::build(c.model);
  const JobSpec one = replan_job(c, model.num_layers(), 1);
  const JobSpec three = replan_job(c, model.num_layers(), 3);
  const double stage_of_three = 16.0 * (2 * 64 * 64 + 2 * 64);  // layers 2-3 or 4-5 (< 4-5)
  EXPECT_NO_THROW(check_replan_fits(three, model, stage_of_three));
  try {
    check_replan_fits(one, model, stage_of_three);
    FAIL() << "a whole model in one rank's share fit";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("re-planned onto 1 ranks, stage 0 (layers 0-5)"), std::string::npos)
        << what;
    EXPECT_NE(what.find("the model needs more ranks than are left"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace tandem::train
