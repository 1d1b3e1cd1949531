// Planning on graphs: what a cut carries (cut_bytes.hpp, detail/pipedream_cut_rule.hpp) and a
// plan that only counting a skip edge's bytes gets right.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/cluster.hpp"
#include "planner/cut_bytes.hpp"
#include "planner/detail/pipedream_cut_rule.hpp"
#include "planner/pipeline_planner.hpp"
#include "planner/profile.hpp"

namespace tandem::planner {
namespace {

// Layers of 1 ms forward and backward each, no weights, the given outputs and inputs.
Profile graph(const std::vector<double>& outputs, const std::vector<std::vector<int>>& inputs) {
  Profile profile;
  profile.minibatch = 1;
  for (std::size_t l = 0; l < outputs.size(); ++l) {
    LayerProfile layer;
    layer.name = std::to_string(l);
    layer.forward_ms = 1;
    layer.backward_ms = 1;
    layer.activation_bytes = outputs[l];
    layer.inputs = inputs[l];
    profile.layers.push_back(layer);
  }
  return profile;
}

TEST(CutBytes, AChainCarriesEachLayersOutput) {
  Profile chain = graph({3, 5, 7}, {{}, {}, {}});
  EXPECT_EQ(cut_bytes(chain), (std::vector<double>{3, 5, 7}));
  EXPECT_EQ(detail::pipedream_cut_bytes(chain), (std::vector<double>{3, 5, 7}));
  // The same chain with its edges written out charges the same.
  chain.layers[0].inputs = {kProfileModelInput};
  chain.layers[1].inputs = {0};
  chain.layers[2].inputs = {1};
  EXPECT_EQ(cut_bytes(chain), (std::vector<double>{3, 5, 7}));
  EXPECT_EQ(detail::pipedream_cut_bytes(chain), (std::vector<double>{3, 5, 7}));
}

TEST(CutBytes, ASkipIsChargedOnEveryCutItCrosses) {
  // 0 -> 1 -> 2 -> 3, and 0 -> 3: layer 0's output crosses the cuts after 0, 1 and 2 once each;
  // the model input, read again by layer 2, crosses the cuts after 0 and 1.
  Profile skip =
      graph({100, 1, 2, 4}, {{kProfileModelInput}, {0}, {kProfileModelInput, 1}, {0, 2}});
  skip.input_bytes = 1000;
  EXPECT_EQ(cut_bytes(skip), (std::vector<double>{1100, 1101, 102, 4}));
}

TEST(CutBytes, PipeDreamAlsoChargesAnOutputReadBeforeTheCutOnAnotherBranch) {
  // A diamond 0 -> {1, 2} -> 3. Cut after 2: layer 0's readers both lie before it, so only 1
  // and 2 cross; graph.py's augmented antichain [1, 2] adds 0 (its reader 2 is not a
  // predecessor of 1), and PipeDream's optimizer charges 1 + 2 + 4.
  const Profile diamond = graph({4, 1, 2, 8}, {{kProfileModelInput}, {0}, {0}, {1, 2}});
  EXPECT_EQ(cut_bytes(diamond), (std::vector<double>{4, 5, 3, 8}));
  EXPECT_EQ(detail::pipedream_cut_bytes(diamond), (std::vector<double>{4, 5, 7, 8}));
}

// Two workers joined at 1 byte per ms, one stage each (vertical sync replicates nothing).
Cluster two_workers() {
  Cluster cluster;
  cluster.levels.push_back({"worker", 2, 1000.0});
  return cluster;
}

TEST(GraphPlanning, TheChosenCutCountsTheSkipsBytes) {
  // 0 -> 1 -> 2 -> 3 and a skip 0 -> 2 of 100 bytes. Counting only each layer's own output
  // (1 byte), the balanced cut after layer 1 costs max(4, 4, 2 x 1) = 4 ms per minibatch; it
  // also carries the skip, 101 bytes, 2 x 101 = 202 ms. After layer 2 only layer 2's output
  // crosses: max(6, 2, 2) = 6 ms. The planner must pick the latter.
  const Profile skip = graph({100, 1, 1, 1}, {{kProfileModelInput}, {0}, {0, 1}, {2}});
  for (const CostModel model : {CostModel::overlapped, CostModel::pipedream}) {
    SCOPED_TRACE(model == CostModel::overlapped ? "overlapped" : "pipedream");
    PlanRequest request;
    request.schedule = schedules::ScheduleKind::pipedream_vsync;
    request.cost_model = model;
    const PlannedPipeline planned = plan_pipeline(skip, two_workers(), request);
    ASSERT_EQ(planned.plan.stages.size(), 2u);
    EXPECT_EQ(planned.plan.stages[0].layers.end, 3);
    EXPECT_DOUBLE_EQ(planned.time_per_minibatch_ms, 6);

    // The same numbers as a chain (the skip's bytes ignored) choose the other cut.
    Profile ignored = skip;
    for (LayerProfile& layer : ignored.layers) layer.inputs.clear();
    ignored.layers[0].activation_bytes = 1;
    const PlannedPipeline naive = plan_pipeline(ignored, two_workers(), request);
    ASSERT_EQ(naive.plan.stages.size(), 2u);
    EXPECT_EQ(naive.plan.stages[0].layers.end, 2);
    EXPECT_DOUBLE_EQ(naive.time_per_minibatch_ms, 4);
  }
}

}  // namespace
}  // namespace tandem::planner
