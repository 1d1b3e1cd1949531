// Stage states as ranks hand them to rank 0: a round trip, and bytes from a peer that are
// malformed refused with what is wrong, never a bare "stoi" or "stoll".
#include "train/stage_state.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "models/safetensors.hpp"

namespace tandem::apps {
namespace {

train::StageStateBundle bundle() {
  train::StageState st;
  st.stage = 1;
  st.latest.add("1.weight", Tensor::full({2}, 1.0f));
  st.optimizer.steps = 7;
  st.optimizer.state.add("momentum.1.weight", Tensor::full({2}, 0.5f));
  st.older[6].add("1.weight", Tensor::full({2}, 2.0f));
  return train::StageStateBundle{{st}, {}};
}

std::string error_of(const models::ParamSet& tensors, const models::SafetensorsMetadata& meta) {
  try {
    train::decode_stage_states(models::safetensors_bytes(tensors, meta));
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(StageState, RoundTrip) {
  const train::StageStateBundle back =
      train::decode_stage_states(train::encode_stage_states(bundle()));
  ASSERT_EQ(back.stages.size(), 1u);
  EXPECT_EQ(back.stages[0].stage, 1);
  EXPECT_EQ(back.stages[0].optimizer.steps, 7);
  EXPECT_EQ(back.stages[0].optimizer.state.names(),
            (std::vector<std::string>{"momentum.1.weight"}));
  ASSERT_EQ(back.stages[0].older.count(6), 1u);
  EXPECT_EQ(back.stages[0].latest.at("1.weight").to_float_vector(),
            (std::vector<float>{1.0f, 1.0f}));
}

TEST(StageState, RefusesNumbersThatAreNotWholeIntegersInRange) {
  models::ParamSet one;
  one.add("L:1:0:w", Tensor::zeros({1}));
  const models::SafetensorsMetadata good = {{"stages", "1 "}, {"steps:1", "7"}};
  EXPECT_EQ(error_of(one, good), "");
  struct Case {
    models::SafetensorsMetadata meta;
    const char* tensor;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{{"stages", "x"}}, "L:1:0:w", "a stage in 'stages' is 'x'"},
      {{{"stages", "99999999999"}}, "L:1:0:w", "a stage in 'stages' is '99999999999'"},
      {{{"stages", "1"}, {"steps:1", "7x"}}, "L:1:0:w", "'steps:1' is '7x'"},
      {{{"stages", "1"}, {"steps:1", "-1"}}, "L:1:0:w", "'steps:1' is '-1'"},
      {good, "L:x:0:w", "the stage of tensor 'L:x:0:w' is 'x'"},
      {good, "L:1:99999999999999999999:w", "the version of tensor"},
  };
  for (const Case& c : cases) {
    models::ParamSet tensors;
    tensors.add(c.tensor, Tensor::zeros({1}));
    const std::string error = error_of(tensors, c.meta);
    EXPECT_NE(error.find(c.message), std::string::npos) << c.message << ": " << error;
    EXPECT_EQ(error.find("stoi"), std::string::npos) << error;
    EXPECT_EQ(error.find("stoll"), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace tandem::apps
