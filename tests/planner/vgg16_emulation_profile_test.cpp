// configs/bench/vgg16-pipedream-profile.json, what scripts/bench-pipedream-vgg runs VGG-16 on:
// PipeDream's own profile (data/pipedream-vgg16.json) folded onto the zoo's 22 layers, bytes /
// 64. Its times must be PipeDream's, its bytes the paper's / 64 at the cuts the plans use, and
// the planner must plan on it what the bench's configs run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "planner/pipedream_dp.hpp"
#include "planner/profile.hpp"

namespace tandem::planner {
namespace {

const std::filesystem::path kRoot(TANDEM_SOURCE_DIR);

nlohmann::json reference_profile() {
  std::ifstream in(kRoot / "tests/planner/data/pipedream-vgg16.json");
  if (!in) throw std::runtime_error("cannot read the PipeDream reference");
  return nlohmann::json::parse(in).at("profile");
}

std::vector<PipeDreamLayer> layers_of(const Profile& p) {
  std::vector<PipeDreamLayer> out;
  for (const LayerProfile& l : p.layers) {
    out.push_back(
        {l.forward_ms + l.backward_ms, l.parameter_bytes, l.activation_bytes, l.memory_bytes});
  }
  return out;
}

TEST(Vgg16EmulationProfile, HoldsPipeDreamsTimesAndTheBytesOverSixtyFour) {
  const Profile p = load_profile(kRoot / "configs/bench/vgg16-pipedream-profile.json");
  const nlohmann::json ref = reference_profile();
  ASSERT_EQ(p.layers.size(), 22u);
  double time = 0, ref_time = 0, bytes = 0, ref_bytes = 0;
  for (const LayerProfile& l : p.layers) {
    time += l.forward_ms + l.backward_ms;
    bytes += l.parameter_bytes;
  }
  for (const auto& m : ref.at("layers")) {
    ref_time += m.at("forward_ms").get<double>() + m.at("backward_ms").get<double>();
    ref_bytes += m.at("parameter_bytes").get<double>();
  }
  EXPECT_NEAR(time, ref_time, 1e-6);
  EXPECT_NEAR(64 * bytes / ref_bytes, 1.0, 2e-3);  // biases scale by 1/8, not 1/64
  // The cuts of the plans: after pool4 (PipeDream's module 23) and pool5 (module 30).
  EXPECT_EQ(64 * p.layers[13].activation_bytes, ref.at("layers")[23].at("activation_bytes"));
  EXPECT_EQ(64 * p.layers[17].activation_bytes, ref.at("layers")[30].at("activation_bytes"));
}

TEST(Vgg16EmulationProfile, PlansWhatTheBenchRuns) {
  const Profile p = load_profile(kRoot / "configs/bench/vgg16-pipedream-profile.json");
  // configs/examples/cluster-vgg16-16.yaml: 16 workers at 156.25 Mbit/s, sync factor 4.
  const std::vector<PipeDreamLevel> levels{{16, 156.25e6 / 8 / 1e3}};
  PipeDreamOptions options;
  options.sync_factor = 4;
  const PipeDreamPlan ours = plan_pipedream(layers_of(p), levels, options);
  ASSERT_EQ(ours.stages.size(), 2u);  // the paper's 15-1: vgg16-pipedream-15-1.yaml
  EXPECT_EQ(ours.stages[0].end, 18);
  EXPECT_EQ(ours.stages[0].replicas(), 15);
  EXPECT_EQ(ours.stages[1].replicas(), 1);
  // PipeDream's cost model: its optimizer's 54.79 ms (data/pipedream-vgg16.json, 16 machines),
  // up to the biases' bytes.
  options.cost_model = CostModel::pipedream;
  const PipeDreamPlan theirs = plan_pipedream(layers_of(p), levels, options);
  EXPECT_NEAR(theirs.time_per_minibatch, 54.795, 0.1);
  EXPECT_EQ(theirs.workers_used(), 16);
}

}  // namespace
}  // namespace tandem::planner
