// The exchange that brings a job's periodic evaluations to rank 0, between two ranks of one
// control plane in this process: rank 0 evaluates exactly the steps every stage reached, with
// each rank's weights as it sent them, skips the steps a stop kept some rank from (without
// waiting for them past the segment), leaves nothing in its store, and refuses a part that
// holds a stage the model does not have, naming the rank and the step.
#include "train/eval_exchange.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "train/process_group.hpp"
#include "two_ranks.hpp"

namespace tandem::train {
namespace {

using testing::TwoRanks;

// Stages 0 and 1 of a 3-stage model run at rank 0, stage 2 at rank 1.
std::map<int, models::ParamSet> weights(std::vector<int> stages, float value) {
  std::map<int, models::ParamSet> out;
  for (int s : stages) out[s].add(std::to_string(s) + ".weight", Tensor::full({2}, value));
  return out;
}

using Evaluated = std::map<int64_t, std::map<int, models::ParamSet>>;

EvalExchange::Evaluate recorder(Evaluated& into) {
  return
      [&into](int64_t step, const std::map<int, models::ParamSet>& stages) { into[step] = stages; };
}

TEST(EvalExchange, RankZeroEvaluatesTheStepsEveryStageReachedAndSkipsTheRest) {
  TwoRanks job;
  Evaluated evaluated;
  EvalExchange zero(*job.zero, {0, 1}, 3, 2, {4, 8, 12}, recorder(evaluated));
  EvalExchange one(*job.one, {0, 1}, 3, 2, {4, 8, 12}, {});
  zero.add(4, weights({0, 1}, 1.0f));
  one.add(4, weights({2}, 2.0f));
  one.add(8, weights({2}, 3.0f));       // rank 0's stages stopped before step 8
  zero.add(12, weights({0, 1}, 4.0f));  // rank 1's before step 12
  one.finish();
  zero.finish();
  ASSERT_EQ(evaluated.size(), 1U);
  const std::map<int, models::ParamSet>& at4 = evaluated.at(4);
  ASSERT_EQ(at4.size(), 3U);
  EXPECT_EQ(at4.at(0).at("0.weight").data<float>()[0], 1.0f);
  EXPECT_EQ(at4.at(2).at("2.weight").data<float>()[1], 2.0f);
  // Every part and mark was taken: rank 0's store holds none of them.
  EXPECT_EQ(job.zero->rendezvous().stored_bytes(), 0U);
}

TEST(EvalExchange, APartWithAStageTheModelLacksIsRefusedNamingTheRankAndStep) {
  TwoRanks job;
  Evaluated evaluated;
  EvalExchange zero(*job.zero, {0, 1}, 3, 0, {4}, recorder(evaluated));
  EvalExchange one(*job.one, {0, 1}, 3, 0, {4}, {});
  zero.add(4, weights({0, 1}, 1.0f));
  one.add(4, weights({5}, 2.0f));
  one.finish();
  try {
    zero.finish();
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "rank 1's weights for the evaluation at step 4 hold stage 5 of a 3-stage model"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(evaluated.empty());
}

}  // namespace
}  // namespace tandem::train
