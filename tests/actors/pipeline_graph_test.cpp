// A graph's edges over stage cuts: which edges tensor_edges lists when tensors go straight to
// their readers and when the stages in between relay them, and the bytes each way moves.
#include <gtest/gtest.h>

#include <numeric>

#include "actors/stage_edges.hpp"
#include "pipeline_harness.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::LayerRange;
using schedules::TensorEdge;

const std::vector<LayerRange> kFourStages = {{0, 3}, {3, 6}, {6, 9}, {9, 12}};

TEST(TensorEdges, StraightToTheReadersOrRelayed) {
  const models::Model model = tiny_graph();
  constexpr int kIn = models::Model::kModelInput;
  // Stage 1 reads h2 (layer 2) and h0; stage 2 reads the input, h1 (over two cuts) and h5;
  // stage 3 reads c and r1 (over two cuts).
  const std::vector<TensorEdge> direct = tensor_edges(model, kFourStages);
  EXPECT_EQ(direct, (std::vector<TensorEdge>{{0, 1, 0, true},
                                             {0, 1, 2, true},
                                             {0, 2, kIn, false},
                                             {0, 2, 1, true},
                                             {1, 2, 5, true},
                                             {1, 3, 4, true},
                                             {2, 3, 8, true}}));
  const std::vector<TensorEdge> relay = tensor_edges(model, kFourStages, true);
  EXPECT_EQ(relay.size(), direct.size() + 3);
  for (const TensorEdge& e : relay) EXPECT_EQ(e.to, e.from + 1);
  EXPECT_TRUE(tensor_edges(tiny_mlp(), kFourStages).empty());  // a chain
}

struct Sent {
  std::uint64_t bytes = 0;
  models::ParamSet params;
};

Sent graph_run(bool relay, DType wire = DType::f32) {
  const models::Model model = tiny_graph();
  schedules::ScheduleParams p;
  p.kind = schedules::ScheduleKind::one_f_one_b;
  p.stages = 4;
  p.replicas = {1, 1, 1, 1};
  p.slices = 4;
  p.minibatch_size = 8;
  p.minibatches = 3;
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.optimizer = sgd_momentum();
  spec.seed = 3;
  spec.data = [&](std::int64_t b) { return make_minibatch(model, 8, b); };
  spec.relay_skips = relay;
  spec.wire_dtype = wire;
  Pipeline pipeline(std::move(spec), make_scheduler(false));
  const PipelineResult r = pipeline.run();
  Sent out;
  for (const StageStats& s : r.stages) out.bytes += s.bytes_sent;
  out.params = pipeline.params();
  return out;
}

std::uint64_t bytes_sent(bool relay) {
  return graph_run(relay).bytes;
}

TEST(TensorEdges, RelayingMovesEachSkipOnceMorePerCutItCrosses) {
  // Relayed once more: h1 and r1 (12 floats, there and back) and the input (6, no gradient),
  // for each of 3 minibatches of 8 samples.
  const std::uint64_t extra = (12 * 2 + 12 * 2 + 6) * 4 * 8 * 3;
  const std::uint64_t direct = bytes_sent(false);
  EXPECT_GT(direct, 0u);
  EXPECT_EQ(bytes_sent(true), direct + extra);
}

// PipelineSpec::wire_dtype bf16: every activation and gradient between stages, skips and
// relayed ones included, travels in half the bytes, rounded where it leaves its stage; the run
// trains as the f32 one does, within bf16's rounding, but not identically.
TEST(TensorEdges, ABf16WireHalvesTheBytesAndRoundsOnlyBetweenStages) {
  for (const bool relay : {false, true}) {
    const Sent f32 = graph_run(relay);
    const Sent bf16 = graph_run(relay, DType::bf16);
    EXPECT_EQ(bf16.bytes * 2, f32.bytes) << "relay " << relay;
    const double err = max_relative_error(bf16.params, f32.params);
    EXPECT_GT(err, 0.0) << "relay " << relay;
    EXPECT_LT(err, 2e-2) << "relay " << relay;
  }
}

}  // namespace
}  // namespace tandem::actors
