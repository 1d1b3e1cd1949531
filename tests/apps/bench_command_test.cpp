// `tandem bench`: a tiny config run for a few steps reports one row per stage replica, shares in
// [0, 1], a prediction and a finite ratio, on cpu (trained, durations measured by the run) and on
// sim (durations from a profile or FLOP counts); on sim the charged busy time of every replica
// is the simulator's. The conversion of a profile follows the planner's split. No timing is
// asserted.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/bench_run.hpp"
#include "models/model.hpp"
#include "planner/profile.hpp"
#include "train/config.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;
namespace ts = tandem::schedules;
using train::sim_costs_from_profile;
using train::sim_edge_bytes;
using train::sim_simulation_costs;

const char* kMlp = R"(model: {name: mlp, widths: [8, 32, 32, 32, 3]}
data: {kind: teacher, samples: 512, seed: 2, hidden: 8}
train:
  minibatch: 16
  steps: 4
  optimizer: {kind: sgd, lr: 1.0e-2}
  eval: {every: 2, samples: 32}
)";

std::string with_pipeline(const std::string& schedule, const std::string& device,
                          const std::string& extra = "") {
  return std::string(kMlp) + "pipeline:\n  schedule: " + schedule + "\n" + extra +
         "  stages:\n    - {layers: \"0-1\", replicas: 2, device: " + device +
         "}\n    - {layers: \"2-3\", device: " + device + "}\n";
}

// The structure every report has, whatever ran.
void expect_well_formed(const BenchReport& r, int replicas, std::int64_t steps) {
  EXPECT_EQ(r.steps, steps);
  ASSERT_EQ(static_cast<int>(r.replicas.size()), replicas);
  EXPECT_EQ(r.devices, replicas);
  for (int d = 0; d < replicas; ++d) {
    const BenchReplica& x = r.replicas[static_cast<std::size_t>(d)];
    EXPECT_EQ(x.device, d);
    EXPECT_GT(x.actions, 0);
    EXPECT_GE(x.utilization, 0.0);
    EXPECT_LE(x.utilization, 1.0);
    EXPECT_GT(x.predicted_utilization, 0.0) << "device " << d;
    EXPECT_LE(x.predicted_utilization, 1.0 + 1e-9);
  }
  EXPECT_GE(r.bubble, 0.0);
  EXPECT_LE(r.bubble, 1.0);
  EXPECT_GE(r.predicted_bubble, 0.0);
  EXPECT_LE(r.predicted_bubble, 1.0);
  EXPECT_GT(r.samples_per_s, 0.0);
  EXPECT_GT(r.predicted_samples_per_s, 0.0);
  EXPECT_GT(r.predicted_step_ms, 0.0);
  EXPECT_GT(r.predicted_makespan_ms, 0.0);
  EXPECT_TRUE(std::isfinite(r.ratio)) << r.ratio;
  EXPECT_GT(r.ratio, 0.0);
  EXPECT_TRUE(std::isfinite(r.overhead_us_per_action));

  const std::string table = format_bench(r);
  for (int d = 0; d < replicas; ++d) {
    const BenchReplica& x = r.replicas[static_cast<std::size_t>(d)];
    const std::string row =
        "stage " + std::to_string(x.stage) + " replica " + std::to_string(x.replica);
    EXPECT_NE(table.find(row), std::string::npos) << table;
  }
  for (const char* s : {"samples/s", "bubble", "predicted", "ratio"}) {
    EXPECT_NE(table.find(s), std::string::npos) << s << "\n" << table;
  }
  const nlohmann::json j = bench_to_json(r);
  EXPECT_EQ(j.at("replicas").size(), static_cast<std::size_t>(replicas));
  EXPECT_TRUE(j.at("ratio").is_number());
  EXPECT_TRUE(j.at("predicted_step_ms").is_number());
}

TEST(BenchCommand, TrainsACpuConfigAndPredictsFromItsOwnDurations) {
  const train::Config c = train::parse_config(with_pipeline("pipedream", "cpu"), "bench.yaml");
  const BenchReport r = run_bench(c, BenchOptions{.steps = 6});
  expect_well_formed(r, 3, 6);
  EXPECT_EQ(r.mode, "cpu");
  EXPECT_EQ(r.config, "bench.yaml");
  EXPECT_NE(r.plan_line.find("pipedream"), std::string::npos) << r.plan_line;
  // Every replica did something measurable: the prediction's durations came from the run.
  for (const BenchReplica& x : r.replicas) EXPECT_GT(x.busy_s, 0.0);
}

TEST(BenchCommand, KeepsTheTraceWhenAsked) {
  const fs::path trace =
      fs::temp_directory_path() / ("bench-test-" + std::to_string(::getpid()) + ".json");
  const train::Config c =
      train::parse_config(with_pipeline("1f1b", "cpu", "  slices: 2\n"), "bench.yaml");
  const BenchReport r = run_bench(c, BenchOptions{.steps = 3, .trace = trace});
  expect_well_formed(r, 3, 3);
  EXPECT_TRUE(fs::exists(trace));
  fs::remove(trace);
}

planner::Profile uneven_profile(int layers) {
  planner::Profile p;
  p.minibatch = 16;
  for (int i = 0; i < layers; ++i) {
    planner::LayerProfile l;
    l.name = fmt::format("l{}", i);
    l.forward_ms = 1.0 + 0.25 * i;
    l.backward_weight_ms = 0.5 + 0.125 * i;
    l.backward_ms = 1.5 + 0.25 * i + l.backward_weight_ms;
    l.forward_fixed_ms = 0.125;
    l.backward_fixed_ms = 0.25;
    p.layers.push_back(l);
  }
  return p;
}

// On sim the busy time is what the device charged, so it equals the simulator's busy time for
// that replica when the durations reach both the same way (to the nanosecond per op the device
// counts in).
void expect_charged_is_simulated(const BenchReport& r) {
  for (const BenchReplica& x : r.replicas) {
    EXPECT_NEAR(1e3 * x.busy_s, x.predicted_utilization * r.predicted_makespan_ms,
                1e-6 * static_cast<double>(x.actions + 1))
        << "device " << x.device;
  }
}

TEST(BenchCommand, TimesASimConfigWithDurationsFromAProfile) {
  const fs::path path =
      fs::temp_directory_path() / ("bench-profile-" + std::to_string(::getpid()) + ".json");
  planner::save_profile(uneven_profile(4), path);
  const train::Config c =
      train::parse_config(with_pipeline("1f1b", "sim", "  slices: 4\n"), "bench.yaml");
  const BenchReport r = run_bench(c, BenchOptions{.steps = 2, .profile = path});
  fs::remove(path);
  expect_well_formed(r, 3, 2);
  EXPECT_EQ(r.mode, "sim");
  EXPECT_NE(r.durations.find("profile"), std::string::npos) << r.durations;
  expect_charged_is_simulated(r);
}

// A graph of sim nodes (what scripts/pipedream-graph-config writes from a PipeDream graph.txt):
// a skip edge and a merge of three inputs across stages, weights on a replicated stage; the
// device charges the profile's durations, as the simulator does.
TEST(BenchCommand, TimesASimNodeGraphWithItsProfile) {
  const char* config = R"(model:
  input: {name: x, shape: [6]}
  graph:
    - {name: a, layer: sim, out: 10, params: 7}
    - {name: b, layer: sim, out: 3}
    - {name: c, layer: sim, inputs: [b], out: 5, params: 4}
    - {name: d, layer: sim, inputs: [c, a, x], out: 4, params: 2}
data: {kind: teacher, samples: 64, seed: 3, hidden: 8}
train: {minibatch: 16, steps: 2, seed: 1, optimizer: {kind: sgd, lr: 0.1}}
pipeline:
  schedule: pipedream
  stages:
    - {layers: "0-1", replicas: 2, device: sim}
    - {layers: "2-3", device: sim}
)";
  const fs::path path =
      fs::temp_directory_path() / ("bench-sim-graph-" + std::to_string(::getpid()) + ".json");
  planner::Profile p = uneven_profile(4);
  p.layers[3].inputs = {planner::kProfileModelInput, 0, 2};
  planner::save_profile(p, path);
  const train::Config c = train::parse_config(config, "bench.yaml");
  const BenchReport r = run_bench(c, BenchOptions{.steps = 4, .profile = path});
  fs::remove(path);
  expect_well_formed(r, 3, 4);
  EXPECT_EQ(r.mode, "sim");
  expect_charged_is_simulated(r);
  // Layer a's output (10 features) crosses to stage 1 beside b's (3): a skip edge on the wire.
  EXPECT_GT(r.bytes_per_step, 4.0 * 16 * (10 + 3) * 0.99);
}

TEST(BenchCommand, TimesASimConfigFromFlopCountsWithoutAProfile) {
  const train::Config c = train::parse_config(with_pipeline("pipedream", "sim"), "bench.yaml");
  const BenchReport r = run_bench(c, BenchOptions{.steps = 4});
  expect_well_formed(r, 3, 4);
  EXPECT_NE(r.durations.find("FLOP"), std::string::npos) << r.durations;
  expect_charged_is_simulated(r);
}

TEST(BenchCommand, RefusesAProfileOfAnotherModel) {
  const fs::path path =
      fs::temp_directory_path() / ("bench-profile5-" + std::to_string(::getpid()) + ".json");
  planner::save_profile(uneven_profile(5), path);
  const train::Config c =
      train::parse_config(with_pipeline("gpipe", "sim", "  slices: 2\n"), "bench.yaml");
  try {
    (void)run_bench(c, BenchOptions{.steps = 1, .profile = path});
    ADD_FAILURE() << "a 5-layer profile was taken for a 4-layer model";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("5 layers"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(BenchCommand, RefusesStagesOnSimAndOnCpuTogether) {
  const train::Config c =
      train::parse_config(std::string(kMlp) +
                              "pipeline:\n  schedule: gpipe\n  slices: 2\n  stages:\n"
                              "    - {layers: \"0-1\", device: sim}\n"
                              "    - {layers: \"2-3\", device: cpu}\n",
                          "bench.yaml");
  EXPECT_THROW((void)run_bench(c, BenchOptions{.steps = 1}), train::ConfigError);
}

// With links, the prediction's SYNC is the replicated stage's ring all-reduce of its weights:
// 2 (r - 1) W / (r B) more per step than without.
TEST(BenchCommand, PredictsTheRingAllReduceOfAReplicatedStageOverTheLinks) {
  const train::Config c =
      train::parse_config(std::string(kMlp) +
                              "pipeline:\n  schedule: gpipe\n  slices: 2\n  stages:\n"
                              "    - {layers: \"0-3\", replicas: 2, device: sim}\n",
                          "bench.yaml");
  const BenchReport free_links = run_bench(c, BenchOptions{.steps = 2});
  const BenchReport slow = run_bench(c, BenchOptions{.steps = 2, .link_gbit_s = 0.008});
  // mlp [8, 32, 32, 32, 3]: weights and biases, f32; 0.008 Gbit/s is 1000 bytes per ms.
  const double weights = 4.0 * (8 * 32 + 32 + 2 * (32 * 32 + 32) + 32 * 3 + 3);
  EXPECT_NEAR(slow.predicted_step_ms - free_links.predicted_step_ms, weights / 1000, 1e-9);
}

// A graph on four sim stages whose 64-wide layer-1 output is read on stage 1 and, two cuts
// later, on stage 2.
std::string skip_graph(const std::string& skip_edges) {
  return R"(model:
  input: {name: x, shape: [8]}
  graph:
    - {name: a0, layer: linear, out: 16, activation: relu}
    - {name: wide, layer: linear, out: 64}
    - {name: a2, layer: linear, out: 16, activation: relu}
    - {name: a3, layer: linear, out: 16, activation: relu}
    - {name: a4, layer: linear, out: 64}
    - {name: gate, layer: multiply, inputs: [a4, wide]}
    - {name: logits, layer: linear, out: 3}
data: {kind: teacher, samples: 512, seed: 2, hidden: 8}
train:
  minibatch: 16
  steps: 2
  optimizer: {kind: sgd, lr: 1.0e-2}
pipeline:
  schedule: 1f1b
  slices: 4
  skip_edges: )" +
         skip_edges + R"(
  stages:
    - {layers: "0-1", device: sim}
    - {layers: "2-3", device: sim}
    - {layers: "4-5", device: sim}
    - {layers: "6", device: sim}
)";
}

// Relayed, a graph's edges carry across each cut what the cut's elements count (the bytes the
// prediction charged a stage's link before it followed the edges); straight, the skip leaves
// stage 1's link for its own.
TEST(BenchCommand, SimEdgesWeighTheirTensors) {
  const models::Model model =
      models::Model::build(train::parse_config(skip_graph("relay"), "bench.yaml").model);
  const std::vector<ts::LayerRange> vstages = {{0, 2}, {2, 4}, {4, 6}, {6, 7}};
  const std::vector<double> cuts = model.cut_elements(1);
  std::vector<double> relayed(3, 0.0);
  for (const ts::EdgeBytes& e : sim_edge_bytes(model, vstages, true)) {
    ASSERT_EQ(e.edge.to, e.edge.from + 1);
    relayed.at(static_cast<std::size_t>(e.edge.from)) += e.bytes;
  }
  for (std::size_t v = 0; v < 3; ++v) {
    EXPECT_EQ(relayed[v], 4 * cuts.at(static_cast<std::size_t>(vstages[v].end - 1))) << v;
  }
  double skip = 0;
  for (const ts::EdgeBytes& e : sim_edge_bytes(model, vstages, false)) {
    if (e.edge.from == 0 && e.edge.to == 2) skip += e.bytes;
  }
  EXPECT_EQ(skip, 4 * 64);
  EXPECT_TRUE(sim_edge_bytes(models::Model::build(train::parse_config(kMlp, "m.yaml").model),
                             {{0, 2}, {2, 4}}, false)
                  .empty());
}

// On a slow link the prediction charges the relayed skip's extra bytes; free links, nothing.
TEST(BenchCommand, PredictsARelayedSkipSlowerThanAStraightOne) {
  const train::Config direct = train::parse_config(skip_graph("direct"), "bench.yaml");
  const train::Config relay = train::parse_config(skip_graph("relay"), "bench.yaml");
  const BenchOptions slow{.steps = 2, .link_gbit_s = 0.008};
  EXPECT_LT(run_bench(direct, slow).predicted_step_ms, run_bench(relay, slow).predicted_step_ms);
  const BenchOptions free_links{.steps = 2};
  EXPECT_EQ(run_bench(direct, free_links).predicted_step_ms,
            run_bench(relay, free_links).predicted_step_ms);
}

// A profile measured at the slice size gives back its own times; at another size the fixed
// parts stay and the rest scales, with the backward's fixed part on the input gradient.
TEST(BenchCommand, SimCostsFollowTheProfilesSplit) {
  const planner::Profile p = uneven_profile(3);
  const models::SimCosts whole = sim_costs_from_profile(p, p.minibatch, 0.5);
  const models::SimCosts one = sim_costs_from_profile(p, 1);
  EXPECT_EQ(whole.optimizer_step_ms, 0.5);
  for (int i = 0; i < 3; ++i) {
    const planner::LayerProfile& l = p.layers[static_cast<std::size_t>(i)];
    EXPECT_DOUBLE_EQ(whole.forward(i), l.forward_ms);
    EXPECT_DOUBLE_EQ(whole.backward_input(i) + whole.backward_weight(i), l.backward_ms);
    EXPECT_DOUBLE_EQ(whole.backward_weight(i), l.backward_weight_ms);
    EXPECT_DOUBLE_EQ(one.forward(i),
                     l.forward_fixed_ms + (l.forward_ms - l.forward_fixed_ms) / p.minibatch);
    const double input = l.backward_ms - l.backward_weight_ms;
    EXPECT_DOUBLE_EQ(one.backward_input(i),
                     l.backward_fixed_ms + (input - l.backward_fixed_ms) / p.minibatch);
    EXPECT_DOUBLE_EQ(one.backward_weight(i), l.backward_weight_ms / p.minibatch);
  }
  EXPECT_THROW((void)sim_costs_from_profile(p, 0), std::invalid_argument);
}

// A profile's per-layer update (step_ms) becomes each stage's own part of STEP, as the schedule
// ranking charges it: the sim stage adds its layers' entries to optimizer_step_ms.
TEST(BenchCommand, EachStagesStepTakesItsLayersUpdate) {
  planner::Profile p = uneven_profile(3);
  for (int i = 0; i < 3; ++i) p.layers[static_cast<std::size_t>(i)].step_ms = 0.25 * (i + 1);
  const models::SimCosts sim = sim_costs_from_profile(p, p.minibatch, 0.5);
  ASSERT_EQ(sim.step_ms.size(), 3u);
  EXPECT_DOUBLE_EQ(sim.layer_step(2), 0.75);
  const schedules::SimulationCosts costs = sim_simulation_costs(sim, {{0, 1}, {1, 3}});
  EXPECT_DOUBLE_EQ(costs.step, 0.5);
  EXPECT_DOUBLE_EQ(costs.stages[0].step, 0.25);
  EXPECT_DOUBLE_EQ(costs.stages[1].step, 1.25);
  EXPECT_DOUBLE_EQ(models::SimCosts::uniform(3, 1, 1, 1).layer_step(1), 0);  // none given
}

// The command line: the table ends with a BENCH_JSON line; --json prints one object.
std::string run_cli(const std::string& args, int* code) {
  const std::string command = std::string(TANDEM_CLI) + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  if (pipe == nullptr) return out;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) out += buffer.data();
  const int status = ::pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(BenchCommand, PrintsATableAndABenchJsonLineOrJson) {
  const fs::path path =
      fs::temp_directory_path() / ("bench-config-" + std::to_string(::getpid()) + ".yaml");
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    const std::string text = with_pipeline("gpipe", "sim", "  slices: 2\n");
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  int code = -1;
  const std::string table = run_cli("bench " + path.string() + " --steps 2", &code);
  EXPECT_EQ(code, 0) << table;
  const auto at = table.rfind("BENCH_JSON ");
  ASSERT_NE(at, std::string::npos) << table;
  const nlohmann::json line = nlohmann::json::parse(table.substr(at + 11));
  EXPECT_EQ(line.at("suite"), "tandem_bench");
  const nlohmann::json& counters = line.at("results").at(path.string()).at("counters");
  EXPECT_TRUE(counters.at("ratio").is_number());
  EXPECT_TRUE(counters.at("utilization_d2").is_number());

  const std::string json = run_cli("bench " + path.string() + " --steps 2 --json", &code);
  EXPECT_EQ(code, 0) << json;
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j.at("replicas").size(), 3u);
  EXPECT_EQ(j.at("steps"), 2);

  const std::string bad = run_cli("bench " + path.string() + " --steps 0", &code);
  EXPECT_EQ(code, 2) << bad;
  fs::remove(path);
}

}  // namespace
}  // namespace tandem::apps
