// PipeDream's graph.txt reader (planner/pipedream_graph_profile.hpp): its rules, and hostile
// input.
#include "planner/pipedream_graph_profile.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::planner {
namespace {

std::string node(const std::string& id, const std::string& what, const std::string& activation) {
  return id + " -- " + what +
         " -- forward_compute_time=1.500, backward_compute_time=2.000, activation_size=" +
         activation + ", parameter_size=8.000\n";
}

// Input -> conv -> relu -> add, conv -> add (a skip), add -> __getitem__ (dropped). Declared
// out of order, as the profiler's dict writes them.
std::string residual() {
  return node("node4", "Add(inplace)", "16.0") + node("node2", "Conv2d(3, 8)", "[8.0; 2.0]") +
         node("node1", "Input0", "0.0") + node("node3", "ReLU(inplace)", "4.0") +
         node("node10", "__getitem__(0)", "1.0") + "\tnode1 -- node2\n\tnode2 -- node3\n" +
         "\tnode3 -- node4\n\tnode2 -- node4\n\tnode4 -- node10\n";
}

std::string error_of(const std::string& text) {
  try {
    parse_pipedream_graph(text, "graph.txt");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(PipeDreamGraphProfile, ReadsNodesAndEdgesAsPipeDreamsOptimizerDoes) {
  const Profile profile = parse_pipedream_graph(residual(), "graph.txt", 64);
  EXPECT_EQ(profile.minibatch, 64);
  ASSERT_EQ(profile.layers.size(), 3u);  // the Input and the __getitem__ sink dropped
  EXPECT_EQ(profile.layers[0].name, "node2 Conv2d(3, 8)");
  EXPECT_EQ(profile.layers[1].name, "node3 ReLU(inplace)");
  EXPECT_EQ(profile.layers[2].name, "node4 Add(inplace)");
  EXPECT_EQ(profile.layers[0].inputs, (std::vector<int>{kProfileModelInput}));
  EXPECT_EQ(profile.layers[1].inputs, (std::vector<int>{0}));
  EXPECT_EQ(profile.layers[2].inputs, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(profile.layers[0].forward_ms, 1.5);
  EXPECT_DOUBLE_EQ(profile.layers[0].backward_ms, 2);
  EXPECT_DOUBLE_EQ(profile.layers[0].activation_bytes, 10);  // a list is summed
  EXPECT_DOUBLE_EQ(profile.layers[0].memory_bytes, 10);
  EXPECT_DOUBLE_EQ(profile.layers[0].parameter_bytes, 8);
  EXPECT_DOUBLE_EQ(profile.input_bytes, 0);
}

TEST(PipeDreamGraphProfile, OrdersTiesByTheProfilersNumbering) {
  // node10 and node9 both follow node1: node9 first, as numbers, not as strings.
  const Profile profile = parse_pipedream_graph(node("node10", "B", "1") + node("node9", "A", "1") +
                                                    node("node1", "Conv", "1") +
                                                    "\tnode1 -- node10\n\tnode1 -- node9\n",
                                                "graph.txt");
  ASSERT_EQ(profile.layers.size(), 3u);
  EXPECT_EQ(profile.layers[1].name, "node9 A");
  EXPECT_EQ(profile.layers[2].name, "node10 B");
}

TEST(PipeDreamGraphProfile, RejectsHostileInput) {
  const std::string two = node("node1", "Conv", "1") + node("node2", "ReLU", "1");
  EXPECT_EQ(error_of(two + "\tnode1 -- node7\n"),
            "graph.txt:3: edge names node7, not a node declared above");
  EXPECT_EQ(error_of(two + "\tnode2 -- node2\n"), "graph.txt:3: edge from node2 to itself");
  EXPECT_EQ(error_of(two + "\tnode1 -- node2\n\tnode1 -- node2\n"),
            "graph.txt:4: duplicate edge node1 -- node2");
  EXPECT_EQ(error_of(two + "\tnode1 -- node2\n\tnode2 -- node1\n"),
            "graph.txt:1: the graph has a cycle through node node1");
  EXPECT_EQ(error_of(two + node("node1", "Conv", "1")),
            "graph.txt:3: node node1 declared again (first on line 1)");
  EXPECT_EQ(error_of(two + "\tnode1 -- node2\n" + node("node3", "X", "1")),
            "graph.txt:4: a node line after the edge lines");
  EXPECT_EQ(error_of(node("node1", "Conv", "-1")), "graph.txt:1: activation_size: negative");
  EXPECT_EQ(error_of(node("node1", "Conv", "1e999")),
            "graph.txt:1: activation_size: not a number: '1e999'");
  EXPECT_EQ(error_of(node("node1", "Conv", "[1; 2")),
            "graph.txt:1: activation_size: unterminated list");
  EXPECT_EQ(error_of(node("node1", "Conv", "nan")), "graph.txt:1: activation_size: not finite");
  EXPECT_EQ(error_of("node1 -- Conv\n"),
            "graph.txt:1: expected 'ID -- DESCRIPTION -- forward_compute_time=..., ...'");
  EXPECT_EQ(error_of("node1 -- Conv -- forward_compute_time=1\n"),
            "graph.txt:1: expected forward_compute_time, backward_compute_time, activation_size "
            "and parameter_size");
  EXPECT_EQ(error_of("node1 -- Conv -- speed=1, backward_compute_time=1, activation_size=1, "
                     "parameter_size=1\n"),
            "graph.txt:1: expected forward_compute_time=..., got 'speed=1'");
  EXPECT_EQ(error_of("\tnode1 -- node2 -- node3\n"),
            "graph.txt:1: expected an edge '\\tFROM -- TO'");
  EXPECT_EQ(error_of(""), "graph.txt: no nodes");
  EXPECT_EQ(error_of(node("node1", "Input0", "1")),
            "graph.txt: no nodes besides inputs and __getitem__ sinks");
  EXPECT_THROW(parse_pipedream_graph(two, "graph.txt", 0), std::runtime_error);
  // Huge counts: a node line per byte would take a 65537-node file; the bound holds first.
  std::string many;
  for (int i = 0; i <= 65536; ++i) {
    std::string id = "n";
    id += std::to_string(i);
    many += node(id, "X", "1");
  }
  EXPECT_EQ(error_of(many), "graph.txt:65537: more than 65536 nodes");
}

}  // namespace
}  // namespace tandem::planner
