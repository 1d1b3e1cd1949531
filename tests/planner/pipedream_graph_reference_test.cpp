// CostModel::pipedream on graphs against PipeDream's own optimizer on its authors' profiles
// (data/README.md): ResNet-50 and Inception-v3 (its branches compressed by the authors'
// compress_branches, as their optimizer's README prescribes for Inception).
//
// The expected times are what optimizer_graph_hierarchical.py printed, run unchanged with
// python3 on these files (numpy and graphviz stubbed: numpy only prints a table, graphviz only
// draws) with --activation_compression_ratio 1, so that cuts are charged as in
// pipedream_reference_test.cpp. It plans over the whole antichain DAG of the graph; Tandem
// plans over contiguous runs of one topological order (the reader's). The expected stages are
// what the same script chose when its states were restricted to the prefixes of that order
// (every other line unchanged). On every run but one that is also the unrestricted time, so the
// restriction loses nothing there (where both tie, PipeDream's unrestricted pick may be another
// partition of the same time: the straight runs). The exception, Inception-v3 on 8 workers,
// is the documented difference: PipeDream cuts its last two stages at a down-set that is no
// prefix of one order (it moves a 1.01 ms branch across the cut), 1.7% faster.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "planner/detail/pipedream_cut_rule.hpp"
#include "planner/pipedream_dp.hpp"
#include "planner/pipedream_graph_profile.hpp"

namespace tandem::planner {
namespace {

struct Stage {
  int begin = 0;
  int end = 0;
  int replicas = 0;
  bool operator==(const Stage&) const = default;
};

void PrintTo(const Stage& s, std::ostream* os) {
  *os << "[" << s.begin << "," << s.end << ")x" << s.replicas;
}

struct OptimizerRun {
  std::string graph;  // under tests/planner/data
  int workers = 0;
  double bandwidth = 0;  // bytes per second
  bool straight = false;
  double seconds = 0;  // PipeDream's "Time per stage in pipeline"
  std::vector<Stage> stages;
  // PipeDream's time restricted to prefixes of our order, where it differs from `seconds`.
  double restricted_seconds = 0;
};

const char* const kResNet50 = "pipedream-resnet50-graph.txt";
const char* const kInception = "pipedream-inception_v3-compressed-graph.txt";

// The profile as PipeDream's optimizer reads it: seconds and bytes.
std::vector<PipeDreamLayer> layers_of(const Profile& profile) {
  const std::vector<double> cuts = detail::pipedream_cut_bytes(profile);
  std::vector<PipeDreamLayer> layers;
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const LayerProfile& layer = profile.layers[l];
    layers.push_back({(layer.forward_ms + layer.backward_ms) / 1000, layer.parameter_bytes, cuts[l],
                      layer.memory_bytes});
  }
  return layers;
}

TEST(PipeDreamGraphReference, ReproducesPipeDreamsOptimizerOnGraphs) {
  const std::vector<OptimizerRun> runs = {
      {kResNet50, 4, 1e9, false, 0.16288092399999993, {{0, 94, 2}, {94, 176, 2}}},
      {kResNet50, 8, 1e9, false, 0.09201227199999996, {{0, 133, 5}, {133, 176, 3}}},
      {kResNet50,
       4,
       1e9,
       true,
       0.2581489999999999,
       {{0, 4, 1}, {4, 89, 1}, {89, 90, 1}, {90, 176, 1}}},
      {kResNet50,
       16,
       1e10,
       false,
       0.028493200383999974,
       {{0, 44, 6},
        {44, 101, 5},
        {101, 119, 1},
        {119, 134, 1},
        {134, 144, 1},
        {144, 156, 1},
        {156, 176, 1}}},
      {kInception, 4, 1e9, false, 0.227278848, {{0, 17, 1}, {17, 51, 2}, {51, 91, 1}}},
      {kInception, 4, 1e9, true, 0.2408448, {{0, 17, 1}, {17, 36, 1}, {36, 46, 1}, {46, 91, 1}}},
      {kInception,
       8,
       1e9,
       false,
       0.11951465600000008,
       {{0, 41, 4}, {41, 57, 2}, {57, 91, 2}},
       0.12163684799999992},
  };
  const auto data = std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/planner/data";
  for (const OptimizerRun& run : runs) {
    SCOPED_TRACE(run.graph + " on " + std::to_string(run.workers) + " workers" +
                 (run.straight ? ", straight" : ""));
    const Profile profile = load_pipedream_graph(data / run.graph);
    const std::vector<PipeDreamLayer> layers = layers_of(profile);
    ASSERT_EQ(layers.size(), run.graph == kResNet50 ? 176u : 91u);
    PipeDreamOptions options;
    options.cost_model = CostModel::pipedream;
    options.sync_factor = 4;
    options.replicate = !run.straight;
    const std::vector<PipeDreamLevel> levels{{run.workers, run.bandwidth}};
    const PipeDreamPlan plan = plan_pipedream(layers, levels, options);
    if (run.restricted_seconds > 0) {
      EXPECT_NEAR(plan.time_per_minibatch, run.restricted_seconds, 1e-9 * run.restricted_seconds);
      EXPECT_GT(plan.time_per_minibatch, run.seconds);
    } else {
      EXPECT_NEAR(plan.time_per_minibatch, run.seconds, 1e-9 * run.seconds);
    }
    std::vector<Stage> ours;
    for (const PipeDreamStage& stage : plan.stages) {
      ours.push_back({stage.begin, stage.end, stage.replicas()});
    }
    EXPECT_EQ(ours, run.stages);
  }
}

}  // namespace
}  // namespace tandem::planner
