// The correctness contract (docs/architecture.md#correctness-contract): every flush schedule, for
// any partition, replica count and slicing, ends with the weights of single-device training on the
// same minibatches.
#include <gtest/gtest.h>

#include "pipeline_harness.hpp"
#include "runtime/scheduler.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::ScheduleKind;
using schedules::ScheduleParams;

struct Case {
  std::string name;
  std::string model;  // mlp | gpt | graph, or mlp_mse | graph_mse | mlp_bce (other losses)
  ScheduleKind kind;
  int stages;
  std::vector<int> replicas;
  int slices;
  std::int64_t minibatch;
  int chunks = 1;
  bool remat = false;
  std::vector<std::vector<std::int64_t>> fwd = {}, bwd = {};
  bool relay = false;       // graph: skip edges relayed by the stages in between
  double tolerance = 1e-5;  // the weights' relative error against one device
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.name;
}

ScheduleParams params_of(const Case& c, std::int64_t minibatches) {
  ScheduleParams p;
  p.kind = c.kind;
  p.stages = c.stages;
  p.replicas = c.replicas;
  p.slices = c.slices;
  p.minibatch_size = c.minibatch;
  p.chunks = c.chunks;
  p.rematerialize = c.remat;
  p.minibatches = minibatches;
  p.forward_slices = c.fwd;
  p.backward_slices = c.bwd;
  return p;
}

class FlushContract : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(FlushContract, WeightsEqualSingleDeviceTraining) {
  const auto& [c, threads] = GetParam();
  const models::Model model = c.model == "gpt"         ? tiny_gpt()
                              : c.model == "graph"     ? tiny_graph()
                              : c.model == "graph_mse" ? tiny_graph("mse")
                              : c.model == "mlp_mse"   ? tiny_mlp("mse")
                              : c.model == "mlp_bce"   ? tiny_mlp("bce_with_logits")
                                                       : tiny_mlp();
  constexpr std::int64_t kMinibatches = 3;
  const std::uint64_t seed = 11;
  auto data = [&](std::int64_t b) { return make_minibatch(model, c.minibatch, b); };

  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, params_of(c, kMinibatches));
  spec.optimizer = sgd_momentum();
  spec.seed = seed;
  spec.data = data;
  spec.relay_skips = c.relay;
  Pipeline pipeline(std::move(spec), make_scheduler(threads));
  const PipelineResult result = pipeline.run();
  ASSERT_EQ(result.losses.size(), static_cast<std::size_t>(kMinibatches));

  const models::ParamSet expected =
      reference_training(model, model.init_params(seed), sgd_momentum(), seed, kMinibatches, data);
  const int max_replicas = *std::max_element(c.replicas.begin(), c.replicas.end());
  for (int r = 0; r < std::max(1, max_replicas); ++r) {
    EXPECT_LE(max_relative_error(pipeline.params(r), expected), c.tolerance) << "replica " << r;
  }
  // The losses it reports are the single-device losses of the same minibatches.
  double loss0 = 0;
  reference_grads(model, model.init_params(seed), data(0), seed, 0, &loss0);
  EXPECT_NEAR(result.losses.front(), loss0, 1e-5 * std::max(1.0, loss0));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // graph: edges that skip stages travel straight to the stage that reads them, under every
  // schedule (tiny_graph).
  for (const char* m : {"mlp", "gpt", "graph"}) {
    const std::string M = m;
    out.push_back({M + "_gpipe_1stage", M, ScheduleKind::gpipe, 1, {1}, 2, 8});
    out.push_back({M + "_gpipe_2stages", M, ScheduleKind::gpipe, 2, {1, 1}, 4, 8});
    out.push_back({M + "_gpipe_4stages_211", M, ScheduleKind::gpipe, 3, {2, 1, 1}, 4, 8});
    out.push_back({M + "_gpipe_remat", M, ScheduleKind::gpipe, 3, {1, 1, 1}, 4, 8, 1, true});
    out.push_back({M + "_1f1b_4stages", M, ScheduleKind::one_f_one_b, 4, {1, 1, 1, 1}, 4, 8});
    out.push_back({M + "_1f1b_121", M, ScheduleKind::one_f_one_b, 3, {1, 2, 1}, 4, 8});
    out.push_back({M + "_naive", M, ScheduleKind::naive, 2, {1, 1}, 2, 6});
    out.push_back({M + "_interleaved", M, ScheduleKind::interleaved, 2, {1, 1}, 4, 8, 2});
    out.push_back({M + "_zb_h1", M, ScheduleKind::zb_h1, 3, {1, 1, 1}, 4, 8});
    out.push_back({M + "_zb_v", M, ScheduleKind::zb_v, 2, {1, 1}, 4, 8, 2});
    out.push_back({M + "_zb_2p", M, ScheduleKind::zb_2p, 3, {1, 1, 1}, 4, 8});
    out.push_back({M + "_umpipe",
                   M,
                   ScheduleKind::umpipe,
                   3,
                   {1, 1, 1},
                   2,
                   8,
                   1,
                   false,
                   {{1, 3, 4}, {4, 4}, {2, 6}},
                   {{3, 5}, {8}, {5, 3}}});
  }
  // Four stages of tiny_graph, skip edges over two cuts, the first stage replicated.
  out.push_back({"graph_1f1b_2111", "graph", ScheduleKind::one_f_one_b, 4, {2, 1, 1, 1}, 4, 8});
  out.push_back({"graph_gpipe_4stages", "graph", ScheduleKind::gpipe, 4, {1, 1, 1, 1}, 4, 8});
  out.push_back({"graph_zb_h1_4stages", "graph", ScheduleKind::zb_h1, 4, {1, 1, 1, 1}, 4, 8});
  out.push_back(
      {"graph_interleaved_4stages", "graph", ScheduleKind::interleaved, 2, {1, 1}, 4, 8, 2});
  // The same tensors relayed through the stages in between instead.
  for (Case c : std::vector<Case>(out.end() - 4, out.end())) {
    c.name += "_relay";
    c.relay = true;
    out.push_back(c);
  }
  Case umpipe_relay = out[out.size() - 9];  // graph_umpipe
  umpipe_relay.name += "_relay";
  umpipe_relay.relay = true;
  out.push_back(umpipe_relay);
  // Regression losses: each slice's gradient is scaled by the minibatch's target elements, so
  // the slices add up to the gradient of the minibatch mean exactly as cross-entropy's do.
  for (const char* m : {"mlp_mse", "graph_mse"}) {
    const std::string M = m;
    out.push_back({M + "_1f1b_4stages", M, ScheduleKind::one_f_one_b, 4, {1, 1, 1, 1}, 4, 8});
    out.push_back({M + "_gpipe_121", M, ScheduleKind::gpipe, 3, {1, 2, 1}, 4, 8});
    out.push_back({M + "_umpipe",
                   M,
                   ScheduleKind::umpipe,
                   3,
                   {1, 1, 1},
                   2,
                   8,
                   1,
                   false,
                   {{1, 3, 4}, {4, 4}, {2, 6}},
                   {{3, 5}, {8}, {5, 3}}});
  }
  out.push_back(
      {"mlp_bce_1f1b_4stages", "mlp_bce", ScheduleKind::one_f_one_b, 4, {1, 1, 1, 1}, 4, 8});
  // Graphs, skips straight or relayed: 1e-6 (issue 40). A skip's gradient is summed with the
  // chain's in the whole model's order (docs/architecture.md, "Graph models"); what differs
  // from one device is the order of the float sums over samples (per slice, then the slices',
  // then the replicas'): 1.5e-7 at worst when last measured.
  for (Case& c : out) {
    if (c.model.rfind("graph", 0) == 0) c.tolerance = 1e-6;
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Schedules, FlushContract,
                         ::testing::Combine(::testing::ValuesIn(cases()), ::testing::Bool()),
                         [](const auto& test) {
                           return std::get<0>(test.param).name +
                                  (std::get<1>(test.param) ? "_threads" : "_manual");
                         });

}  // namespace
}  // namespace tandem::actors
