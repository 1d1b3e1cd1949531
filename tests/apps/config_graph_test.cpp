// Graph models in a config: `model: {input, graph}` becomes a ModelSpec the zoo builds, and every
// bad graph is refused with one error at the file, line and column of the node at fault.
#include <gtest/gtest.h>

#include <string>

#include "config_errors.hpp"
#include "models/model.hpp"
#include "train/config.hpp"

namespace tandem::apps {
namespace {

// Line 4 is node 0; node i is on line 4 + i.
const char* kGraph = R"(model:
  input: {name: x, shape: [6]}
  graph:
    - {name: h0, layer: linear, out: 8, activation: relu}
    - {name: h1, layer: linear, out: 8}
    - {name: r, layer: add, inputs: [h1, h0]}
    - {name: g, layer: linear, out: 8, inputs: [x]}
    - {name: m, layer: multiply, inputs: [r, g]}
    - {name: c, layer: concat, inputs: [m, h0]}
    - {name: d, layer: dropout, p: 0.1}
    - {name: out, layer: linear, out: 4}
data: {kind: teacher, samples: 512, seed: 3}
train: {minibatch: 16, steps: 4, seed: 1, optimizer: {kind: sgd, lr: 0.1}}
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  return testing::replace_once(std::move(text), from, to);
}

void expect_error(const std::string& text, int line, std::initializer_list<std::string> words) {
  testing::expect_config_error(text, "g.yaml", line, 0, words);
}

TEST(ConfigGraph, ParsesNodesEdgesAndTheInput) {
  const train::Config c = train::parse_config(kGraph, "g.yaml");
  EXPECT_EQ(c.model.name, "graph");
  EXPECT_EQ(c.model.graph.input_name, "x");
  EXPECT_EQ(c.model.graph.input_shape, (std::vector<int64_t>{6}));
  ASSERT_EQ(c.model.graph.nodes.size(), 8u);
  EXPECT_EQ(c.model.graph.nodes[5].inputs, (std::vector<std::string>{"m", "h0"}));
  EXPECT_FLOAT_EQ(c.model.graph.nodes[6].p, 0.1f);
  const models::Model m = models::Model::build(c.model);
  EXPECT_EQ(m.sources(5), (std::vector<int>{4, 0}));
  EXPECT_EQ(m.sources(3), (std::vector<int>{models::Model::kModelInput}));
  EXPECT_EQ(m.activation_shapes(2).back(), (Shape{2, 4}));
  // The teacher's features and classes come from the graph's input and output.
  const auto& d = std::get<models::data::TeacherData>(c.data);
  EXPECT_EQ(d.spec.features, 6);
  EXPECT_EQ(d.spec.classes, 4);
}

TEST(ConfigGraph, BadGraphsPointAtTheNode) {
  // A node reading a later one would close a cycle.
  expect_error(replace(kGraph, "{name: h1, layer: linear, out: 8}",
                       "{name: h1, layer: linear, out: 8, inputs: [m]}"),
               5, {"model.graph[1]", "reads 'm', which is not earlier", "cycle"});
  expect_error(replace(kGraph, "inputs: [h1, h0]", "inputs: [h1, nope]"), 6,
               {"model.graph[2]", "'nope'", "neither an earlier node nor the input 'x'"});
  expect_error(replace(kGraph, "{name: g,", "{name: h0,"), 7, {"used twice"});
  expect_error(replace(kGraph, "inputs: [r, g]", "inputs: [r, x]"), 8,
               {"model.graph[4]", "multiply needs equal shapes", "[1, 6]"});
  expect_error(replace(kGraph, "layer: concat", "layer: conv9d"), 9, {"unknown layer 'conv9d'"});
  expect_error(replace(kGraph, "inputs: [m, h0]", "inputs: [m]"), 9,
               {"concat needs at least two inputs"});
  // g's output made unread: m reads r twice.
  expect_error(replace(kGraph, "inputs: [r, g]", "inputs: [r, r]"), 7,
               {"model.graph[3]", "never read"});
  expect_error(replace(kGraph, "activation: relu", "activation: swish"), 4,
               {"unknown activation 'swish'"});
  expect_error(replace(kGraph, "p: 0.1", "p: 1.5"), 10, {"model.graph[6].p"});
  expect_error(replace(kGraph, "p: 0.1", "p: .nan"), 10, {"model.graph[6].p"});
  expect_error(replace(kGraph, "out: 4}", "out: 4, tie: 3}"), 11,
               {"model.graph[7].tie", "unknown key"});
  expect_error(replace(kGraph, "out: 4}", "out: 0}"), 11, {"model.graph[7].out"});
  expect_error(replace(kGraph, "out: 4}", "out: 99999999999}"), 11, {"model.graph[7].out"});
  expect_error(replace(kGraph, "{name: h1, layer: linear, out: 8}", "[h1, linear]"), 5,
               {"model.graph[1]"});
  expect_error(replace(kGraph, "{name: h1, layer: linear, out: 8}", "{layer: linear, out: 8}"), 5,
               {"model.graph[1]", "name"});
  expect_error(replace(kGraph, "inputs: [h1, h0]", "inputs: [h1, [h0, [h0]]]"), 6,
               {"model.graph[2].inputs"});
}

TEST(ConfigGraph, TheInputAndTheListAreChecked) {
  expect_error(replace(kGraph, "shape: [6]", "shape: []"), 2, {"model.input.shape"});
  expect_error(replace(kGraph, "shape: [6]", "shape: [6, 0]"), 2, {"model.input.shape"});
  expect_error(replace(kGraph, "shape: [6]", "shape: [1, 2, 3, 4]"), 2, {"model.input.shape"});
  expect_error(replace(kGraph, "  input: {name: x, shape: [6]}\n", ""), 1, {"input"});
  expect_error(replace(kGraph, "name: x,", "name: x, dtype: f32,"), 2, {"model.input.dtype"});
  expect_error("model:\n  input: {shape: [6]}\n  graph: []\n", 3, {"model.graph", "list"});
  expect_error("model:\n  input: {shape: [6]}\n  graph: {a: 1}\n", 3, {"model.graph", "list"});
  expect_error(replace(kGraph, "model:\n", "model:\n  name: mlp\n"), 4,
               {"a graph is its own model"});
  // The teacher gives feature vectors of the input's width.
  expect_error(replace(kGraph, "seed: 3}", "seed: 3, features: 5}"), 12, {"features"});
}

TEST(ConfigGraph, SkipEdgesAreDirectOrRelayed) {
  const std::string pipeline =
      "pipeline:\n  schedule: 1f1b\n  slices: 2\n  skip_edges: relay\n  stages:\n"
      "    - {layers: \"0-3\"}\n    - {layers: \"4-7\"}\n";
  const train::Config c = train::parse_config(std::string(kGraph) + pipeline, "g.yaml");
  ASSERT_TRUE(c.pipeline.has_value());
  EXPECT_TRUE(c.pipeline->relay_skips);
  expect_error(std::string(kGraph) + replace(pipeline, "relay", "teleport"), 17,
               {"pipeline.skip_edges", "direct or relay"});
}

// A sim-only graph (what scripts/pipedream-graph-config writes from a PipeDream profile): line
// 4 is node 0, the pipeline's stages on lines 12 and 13.
const char* kSim = R"(model:
  input: {name: x, shape: [6]}
  graph:
    - {name: a, layer: sim, out: 10, params: 7}
    - {name: b, layer: sim, out: 3}
    - {name: c, layer: sim, inputs: [b, a, x], out: 4, params: 2}
data: {kind: teacher, samples: 64, seed: 3}
train: {minibatch: 8, steps: 2, seed: 1, optimizer: {kind: sgd, lr: 0.1}}
pipeline:
  schedule: pipedream
  stages:
    - {layers: "0-1", device: sim}
    - {layers: "2-2", device: sim}
)";

TEST(ConfigGraph, SimNodesCarryTheirWidthsAndWeights) {
  const train::Config c = train::parse_config(kSim, "g.yaml");
  ASSERT_EQ(c.model.graph.nodes.size(), 3u);
  EXPECT_EQ(c.model.graph.nodes[0].params, 7);
  EXPECT_EQ(c.model.graph.nodes[1].params, 0);
  const models::Model m = models::Model::build(c.model);
  EXPECT_EQ(m.sources(2), (std::vector<int>{1, 0, models::Model::kModelInput}));
  EXPECT_EQ(m.activation_shapes(5).back(), (Shape{5, 4}));
  EXPECT_EQ(m.layer(2).arity(), 3);
  EXPECT_EQ(m.layer(0).param_numel(), 7);
  EXPECT_EQ(m.layer(1).param_numel(), 0);
  // The description tells two sim graphs apart (checkpoints compare them).
  EXPECT_NE(
      c.model.describe(),
      train::parse_config(replace(kSim, "params: 7", "params: 8"), "g.yaml").model.describe());
}

TEST(ConfigGraph, SimNodesAreCheckedAndRunOnlyOnSim) {
  expect_error(replace(kSim, "out: 10, params: 7", "out: 0, params: 7"), 4, {"model.graph[0].out"});
  expect_error(replace(kSim, "params: 7", "params: -1"), 4, {"model.graph[0].params", ">= 0"});
  expect_error(replace(kSim, "params: 7", "params: 99999999999"), 4, {"model.graph[0].params"});
  expect_error(replace(kSim, "params: 7", "params: many"), 4, {"model.graph[0].params"});
  expect_error(replace(kSim, "params: 7", "params: 7, hidden: 3"), 4,
               {"model.graph[0].hidden", "unknown key"});
  expect_error(replace(kSim, "inputs: [b, a, x]", "inputs: [b, a, c]"), 6, {"model.graph[2]"});
  // On a device that computes, or without a pipeline: refused where it is set.
  expect_error(replace(kSim, "{layers: \"2-2\", device: sim}", "{layers: \"2-2\", device: cpu}"),
               13, {"pipeline.stages[1].device", "sim layer", "device sim"});
  expect_error(replace(kSim, "{layers: \"0-1\", device: sim}",
                       "{layers: \"0-1\", replicas: 2, devices: [sim, cpu]}"),
               12, {"pipeline.stages[0].device", "sim layer"});
  const std::string bare = std::string(kSim).substr(0, std::string(kSim).find("pipeline:"));
  expect_error(bare, 1, {"model.graph", "only in a pipeline"});
}

// Procedural images fit a graph of one f32 input holding them ([C, H, W] or flattened); a
// size that differs is refused at the data's image_size.
TEST(ConfigGraph, ShapesDataFitsAnImageGraph) {
  const std::string images = R"(model:
  input: {name: image, shape: [3, 16, 16]}
  graph:
    - {name: c, layer: conv2d, out: 4, kernel: 3, pad: 1}
    - {name: g, layer: global_avg_pool}
    - {name: out, layer: linear, out: 6}
data: {kind: shapes, samples: 64, seed: 1, image_size: 16}
train: {minibatch: 16, steps: 2, seed: 1, optimizer: {kind: sgd, lr: 0.1}}
)";
  const train::Config c = train::parse_config(images, "g.yaml");
  EXPECT_EQ(std::get<models::data::ProceduralImagesData>(c.data).spec.image_size, 16);
  expect_error(replace(images, "image_size: 16}", "image_size: 32}"), 7,
               {"data.image_size", "must equal the model's input size 768"});
}

TEST(ConfigGraph, AHugeGraphIsRefusedBeforeAnythingIsBuilt) {
  std::string text = "model:\n  input: {shape: [4]}\n  graph:\n";
  text.reserve(text.size() + 100001 * 40);
  for (int i = 0; i < 100001; ++i) {
    text += "    - {name: n" + std::to_string(i) + ", layer: relu}\n";
  }
  expect_error(text, 3, {"100001 nodes"});
}

}  // namespace
}  // namespace tandem::apps

namespace tandem::apps {
namespace {

// An image graph: line 4 is node 0, node i on line 4 + i.
const char* kImages = R"(model:
  input: {name: x, shape: [48]}
  graph:
    - {name: img, layer: reshape, shape: [3, 4, 4]}
    - {name: c1, layer: conv2d, out: 4, kernel: 1, kernel_w: 3, pad: 0, pad_w: 1, activation: relu}
    - {name: bn, layer: batch_norm}
    - {name: mp, layer: max_pool, kernel: 3, stride: 1, pad: 1}
    - {name: ap, layer: avg_pool, kernel: 2, stride: 2}
    - {name: gp, layer: global_avg_pool}
    - {name: out, layer: linear, out: 3}
data: {kind: teacher, samples: 64, seed: 3}
train: {minibatch: 8, steps: 2, seed: 1, optimizer: {kind: sgd, lr: 0.1}}
)";

TEST(ConfigGraph, ImageNodesBuildTheirLayers) {
  const train::Config c = train::parse_config(kImages, "i.yaml");
  const models::GraphNode& conv = c.model.graph.nodes[1];
  EXPECT_EQ(conv.kernel, 1);
  EXPECT_EQ(conv.kernel_w, 3);
  EXPECT_EQ(conv.pad_w, 1);
  EXPECT_EQ(c.model.graph.nodes[4].stride, 2);
  const models::Model m = models::Model::build(c.model);
  EXPECT_EQ(m.layer(1).describe(), "conv2d(3->4, k=1x3, stride=1, pad=0x1, relu)");
  EXPECT_EQ(m.layer(2).kind(), "batch_norm2d");
  EXPECT_EQ(m.layer(3).describe(), "max_pool2d(k=3, stride=1, pad=1)");
  EXPECT_EQ(m.layer(4).describe(), "avg_pool2d(k=2, stride=2, pad=0)");
  const std::vector<Shape> shapes = m.activation_shapes(2);
  EXPECT_EQ(shapes[4], (Shape{2, 4, 2, 2}));
  EXPECT_EQ(shapes[5], (Shape{2, 4}));
  EXPECT_TRUE(m.has_buffers());
}

TEST(ConfigGraph, BadImageNodesPointAtTheNode) {
  const auto bad = [](const std::string& from, const std::string& to, int line,
                      std::initializer_list<std::string> words) {
    testing::expect_config_error(testing::replace_once(kImages, from, to), "i.yaml", line, 0,
                                 words);
  };
  bad("kernel: 1, kernel_w", "kernel: -1, kernel_w", 5, {"model.graph[1].kernel", ">= 1"});
  bad("kernel_w: 3", "kernel_w: 0", 5, {"model.graph[1].kernel_w"});
  bad("pad: 0, pad_w", "pad: -2, pad_w", 5, {"model.graph[1].pad", ">= 0"});
  bad("kernel: 1, kernel_w", "kernel: 1.5, kernel_w", 5, {"model.graph[1].kernel"});
  bad("kernel: 1, kernel_w", "kernel: seven, kernel_w", 5, {"model.graph[1].kernel"});
  bad("out: 4, kernel", "out: 0, kernel", 5, {"model.graph[1].out"});
  // A window larger than the (padded) input: the builder knows the shapes.
  bad("kernel: 1, kernel_w", "kernel: 9, kernel_w", 5,
      {"model.graph[1]", "window that fits", "[1, 3, 4, 4]"});
  bad("activation: relu", "activation: gelu", 5, {"conv2d: unknown activation 'gelu'"});
  bad("kernel: 3, stride: 1, pad: 1", "kernel: 3, stride: 1, pad: 2", 7,
      {"model.graph[3]", "more than half the kernel"});
  bad("kernel: 3, stride: 1, pad: 1", "kernel: 5, stride: 0, pad: 1", 7, {"model.graph[3].stride"});
  bad("kernel: 2, stride: 2}", "kernel: 8, stride: 2}", 8, {"model.graph[4]", "avg_pool2d"});
  bad("{name: bn, layer: batch_norm}", "{name: bn, layer: batch_norm, kernel: 3}", 6,
      {"model.graph[2].kernel", "unknown key"});
  // Images only: a batch norm reading flat features.
  bad("{name: img, layer: reshape, shape: [3, 4, 4]}", "{name: img, layer: relu}", 5,
      {"model.graph[1]", "reads images"});
}

}  // namespace
}  // namespace tandem::apps
