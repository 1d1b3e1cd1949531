// A graph with two named token inputs (a sequence-to-sequence toy, tiny_seq2seq): the inputs
// travel packed as one model input, the stage that embeds the target sequence reads it along a
// skip edge from virtual stage 0, and every flush schedule ends with single-device training's
// weights.
#include <gtest/gtest.h>

#include "pipeline_harness.hpp"
#include "runtime/scheduler.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::ScheduleKind;
using schedules::ScheduleParams;

class NamedInputs : public ::testing::TestWithParam<FlushCase> {};

TEST_P(NamedInputs, EqualOneDevice) {
  const FlushCase& c = GetParam();
  const models::Model model = tiny_seq2seq();
  constexpr std::int64_t kMinibatches = 3;
  const std::uint64_t seed = 7;
  auto data = [&](std::int64_t b) { return make_minibatch(model, 8, b); };
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, flush_params(c, 8, kMinibatches));
  spec.optimizer = sgd_momentum();
  spec.seed = seed;
  spec.data = data;
  spec.relay_skips = c.relay;
  Pipeline pipeline(std::move(spec), make_scheduler(true));
  const PipelineResult result = pipeline.run();
  ASSERT_EQ(result.losses.size(), static_cast<std::size_t>(kMinibatches));
  const models::ParamSet expected =
      reference_training(model, model.init_params(seed), sgd_momentum(), seed, kMinibatches, data);
  for (int r = 0; r < *std::max_element(c.replicas.begin(), c.replicas.end()); ++r) {
    EXPECT_LE(max_relative_error(pipeline.params(r), expected), 1e-6) << "replica " << r;
  }
}

std::vector<FlushCase> inputs_cases() {
  return {
      {"onef1b_4stages", ScheduleKind::one_f_one_b, {1, 1, 1, 1}, 4},
      {"onef1b_4stages_relay", ScheduleKind::one_f_one_b, {1, 1, 1, 1}, 4, 1, true},
      {"gpipe_4stages", ScheduleKind::gpipe, {1, 1, 1, 1}, 4},
      {"zb_h1_4stages", ScheduleKind::zb_h1, {1, 1, 1, 1}, 4},
      {"interleaved", ScheduleKind::interleaved, {1, 1}, 4, 2},
      {"onef1b_2111", ScheduleKind::one_f_one_b, {2, 1, 1, 1}, 4},
      {"umpipe",
       ScheduleKind::umpipe,
       {1, 1, 1},
       2,
       1,
       false,
       {{1, 3, 4}, {4, 4}, {2, 6}},
       {{3, 5}, {8}, {5, 3}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Schedules, NamedInputs, ::testing::ValuesIn(inputs_cases()),
                         [](const auto& test) { return test.param.name; });

}  // namespace
}  // namespace tandem::actors
