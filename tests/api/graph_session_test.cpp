// Graph models built in code (Model::graph): the same graph as a config's `model: {input,
// graph}` trains to the same weights bit for bit, a graph with a custom layer and edges over
// stage cuts learns on 4 stages, and bad graphs are refused naming the node.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tandem/tandem.hpp>
#include <vector>

#include "../train/temp_dir.hpp"

namespace tandem {
namespace {

using apps::testing::TempDir;

const char* kConfig = R"(model:
  input: {name: x, shape: [8]}
  graph:
    - {name: h0, layer: linear, out: 16, activation: relu}
    - {name: h1, layer: linear, out: 16, activation: relu}
    - {name: h2, layer: linear, out: 16}
    - {name: r, layer: add, inputs: [h2, h0]}
    - {name: g, layer: linear, out: 16, inputs: [x]}
    - {name: m, layer: multiply, inputs: [r, g]}
    - {name: c, layer: concat, inputs: [m, h1]}
    - {name: out, layer: linear, out: 4}
data: {kind: teacher, samples: 2048, seed: 1, hidden: 8}
train:
  minibatch: 32
  steps: 12
  optimizer: {kind: sgd, lr: 0.05}
  seed: 4
pipeline:
  schedule: 1f1b
  slices: 4
  stages:
    - {layers: "0-1"}
    - {layers: "2-3"}
    - {layers: "4-5"}
    - {layers: "6-7"}
)";

std::vector<GraphNode> code_graph() {
  using layers::Activation;
  return {
      {"h0", layers::linear(8, 16, Activation::relu), {}},
      {"h1", layers::linear(16, 16, Activation::relu), {}},
      {"h2", layers::linear(16, 16), {}},
      {"r", layers::add(), {"h2", "h0"}},
      {"g", layers::linear(8, 16), {"x"}},
      {"m", layers::multiply(), {"r", "g"}},
      {"c", layers::concat({16, 16}), {"m", "h1"}},
      {"out", layers::linear(32, 4), {}},
  };
}

TEST(GraphSession, CodeBuiltGraphTrainsAsTheConfigsBitForBit) {
  TempDir dir;
  const std::filesystem::path config = dir.path() / "graph.yaml";
  std::ofstream(config) << kConfig;
  Session from_config(config.string());
  const TrainResult want = from_config.run();

  const Model model = Model::graph({8}, code_graph(), "x");
  EXPECT_EQ(model.num_layers(), 8);
  const ConfigData data = config_data(config.string());
  TrainOptions o;
  o.plan = Plan::split_evenly(model, 4, Schedule::one_f_one_b, data.minibatch, 4);
  o.minibatches = 12;
  o.optimizer = tandem::SgdOptions{.lr = 0.05};
  o.seed = 4;
  o.data = data.data;
  Session from_code(model, std::move(o));
  const TrainResult got = from_code.run();
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.weights_fingerprint, want.weights_fingerprint);
}

// y = 2 x: a custom layer inside a graph, between a skip's producer and its reader.
class Doubler final : public Layer {
 public:
  std::string kind() const override { return "doubler"; }
  std::string describe() const override { return "doubler"; }
  Shape output_shape(const Shape& input) const override { return input; }
  ForwardResult forward(const LayerContext& ctx, ParamView, const Tensor& x) const override {
    Tensor y = ctx.k().empty(x.shape());
    ctx.k().copy(x, y);
    ctx.k().scale(y, 2.0f);
    return {y, {}};
  }
  Tensor backward_input(const LayerContext& ctx, ParamView, Saved&,
                        const Tensor& dy) const override {
    Tensor dx = ctx.k().empty(dy.shape());
    ctx.k().copy(dy, dx);
    ctx.k().scale(dx, 2.0f);
    return dx;
  }
};

TEST(GraphSession, AGraphWithACustomLayerAndSkipsLearnsOnFourStages) {
  std::vector<GraphNode> nodes = code_graph();
  nodes.insert(nodes.begin() + 3, GraphNode{"d", std::make_shared<Doubler>(), {"h2"}});
  nodes[4].inputs = {"d", "h0"};  // r = 2 h2 + h0
  const Model model = Model::graph({8}, nodes, "x");
  ASSERT_EQ(model.num_layers(), 9);
  TempDir dir;
  const std::filesystem::path config = dir.path() / "graph.yaml";
  std::ofstream(config) << kConfig;
  const ConfigData data = config_data(config.string());
  TrainOptions o;
  // Layers 0-1 | 2-3 | 4-5 | 6-8: h0 and h1 jump over cuts to r and c.
  o.plan = Plan::split_evenly(model, 4, Schedule::one_f_one_b, data.minibatch, 4);
  o.minibatches = 150;
  o.optimizer = tandem::AdamWOptions{.lr = 3e-3};
  o.seed = 2;
  o.data = data.data;
  Session session(model, std::move(o));
  const TrainResult r = session.run();
  ASSERT_EQ(r.losses.size(), 150u);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += r.losses[static_cast<std::size_t>(i)] / 10;
    last += r.losses[r.losses.size() - 1 - static_cast<std::size_t>(i)] / 10;
  }
  EXPECT_LT(last, 0.6 * first) << first << " -> " << last;
}

std::string graph_error(std::vector<GraphNode> nodes) {
  try {
    (void)Model::graph({8}, std::move(nodes), "x");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(GraphSession, BadGraphsAreRefusedNamingTheNode) {
  std::vector<GraphNode> later = code_graph();
  later[1].inputs = {"m"};
  EXPECT_NE(graph_error(later).find("node 1 'h1': reads 'm', which is not earlier"),
            std::string::npos)
      << graph_error(later);
  std::vector<GraphNode> unknown = code_graph();
  unknown[3].inputs = {"h2", "y"};
  EXPECT_NE(graph_error(unknown).find("'y', which is neither an earlier node nor the input 'x'"),
            std::string::npos);
  std::vector<GraphNode> arity = code_graph();
  arity[3].inputs = {"h2"};
  EXPECT_NE(graph_error(arity).find("node 3 'r': add(2) reads 2 tensors, given 1"),
            std::string::npos)
      << graph_error(arity);
  std::vector<GraphNode> widths = code_graph();
  widths[1].layer = layers::linear(9, 16);  // reads h0's 16 features
  EXPECT_NE(graph_error(widths).find("node 1 'h1'"), std::string::npos) << graph_error(widths);
  std::vector<GraphNode> null = code_graph();
  null[2].layer = nullptr;
  EXPECT_NE(graph_error(null).find("node 2 'h2' has no layer"), std::string::npos);
  std::vector<GraphNode> twice = code_graph();
  twice[4].name = "h0";
  EXPECT_NE(graph_error(twice).find("the name is used twice"), std::string::npos);
}

}  // namespace
}  // namespace tandem
