#include "planner/pipedream_graph_profile.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <map>
#include <queue>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tandem::planner {
namespace {

constexpr std::size_t kMaxNodes = 65536;
constexpr std::size_t kMaxEdges = 1048576;

struct Node {
  std::string id;
  std::string description;
  double forward_ms = 0, backward_ms = 0, activation = 0, parameters = 0;
  std::size_t line = 0;
};

[[noreturn]] void fail(std::string_view source, std::size_t line, const std::string& what) {
  std::string message(source);
  if (line > 0) message += ":" + std::to_string(line);
  throw std::runtime_error(message + ": " + what);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, std::string_view separator) {
  std::vector<std::string_view> parts;
  for (std::size_t at = s.find(separator); at != std::string_view::npos; at = s.find(separator)) {
    parts.push_back(s.substr(0, at));
    s.remove_prefix(at + separator.size());
  }
  parts.push_back(s);
  return parts;
}

double number(std::string_view text, std::string_view source, std::size_t line,
              const std::string& field) {
  text = trim(text);
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
    fail(source, line, field + ": not a number: '" + std::string(text) + "'");
  }
  if (!std::isfinite(value)) fail(source, line, field + ": not finite");
  if (value < 0) fail(source, line, field + ": negative");
  return value;
}

// "key=value": the value, after checking the key.
std::string_view value_of(std::string_view item, std::string_view key, std::string_view source,
                          std::size_t line) {
  item = trim(item);
  const std::size_t equals = item.find('=');
  if (equals == std::string_view::npos || trim(item.substr(0, equals)) != key) {
    fail(source, line, "expected " + std::string(key) + "=..., got '" + std::string(item) + "'");
  }
  return item.substr(equals + 1);
}

Node parse_node(std::string_view text, std::string_view source, std::size_t line) {
  const std::vector<std::string_view> tokens = split(trim(text), " -- ");
  if (tokens.size() < 3 || tokens.size() > 4) {
    fail(source, line, "expected 'ID -- DESCRIPTION -- forward_compute_time=..., ...'");
  }
  Node node;
  node.id = std::string(trim(tokens[0]));
  if (node.id.empty()) fail(source, line, "empty node id");
  node.description = std::string(trim(tokens[1]));
  node.line = line;
  const std::vector<std::string_view> fields = split(tokens[2], ", ");
  if (fields.size() != 4) {
    fail(source, line,
         "expected forward_compute_time, backward_compute_time, activation_size and "
         "parameter_size");
  }
  node.forward_ms = number(value_of(fields[0], "forward_compute_time", source, line), source, line,
                           "forward_compute_time");
  node.backward_ms = number(value_of(fields[1], "backward_compute_time", source, line), source,
                            line, "backward_compute_time");
  std::string_view activation = trim(value_of(fields[2], "activation_size", source, line));
  if (!activation.empty() && activation.front() == '[') {
    // Several outputs, "[a; b]": graph.py sums them.
    if (activation.back() != ']') fail(source, line, "activation_size: unterminated list");
    activation = activation.substr(1, activation.size() - 2);
    for (const std::string_view part : split(activation, ";")) {
      node.activation += number(part, source, line, "activation_size");
    }
    if (!std::isfinite(node.activation)) fail(source, line, "activation_size: sum not finite");
  } else {
    node.activation = number(activation, source, line, "activation_size");
  }
  node.parameters =
      number(value_of(fields[3], "parameter_size", source, line), source, line, "parameter_size");
  if (tokens.size() == 4) value_of(tokens[3], "stage_id", source, line);  // informational
  return node;
}

// Node ids ordered as the profiler numbered them: a trailing number compares as a number.
bool id_before(const std::string& a, const std::string& b) {
  const auto digits = [](const std::string& s) {
    std::size_t at = s.size();
    while (at > 0 && std::isdigit(static_cast<unsigned char>(s[at - 1]))) --at;
    return at;
  };
  const std::size_t da = digits(a), db = digits(b);
  const std::string_view pa(a.data(), da), pb(b.data(), db);
  if (pa != pb) return pa < pb;
  const std::string_view na = std::string_view(a).substr(da), nb = std::string_view(b).substr(db);
  const auto strip = [](std::string_view s) {
    while (s.size() > 1 && s.front() == '0') s.remove_prefix(1);
    return s;
  };
  const std::string_view sa = strip(na), sb = strip(nb);
  if (sa.size() != sb.size()) return sa.size() < sb.size();
  if (sa != sb) return sa < sb;
  return a < b;
}

}  // namespace

Profile parse_pipedream_graph(std::string_view text, std::string_view source, int minibatch) {
  if (minibatch < 1) fail(source, 0, "minibatch must be positive");
  std::vector<Node> nodes;
  std::map<std::string, std::size_t, std::less<>> index;
  std::vector<std::pair<std::size_t, std::size_t>> edges;
  std::set<std::pair<std::size_t, std::size_t>> seen;
  std::size_t line = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view row = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line;
    if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
    if (trim(row).empty()) continue;
    if (row.front() != '\t') {
      if (!edges.empty()) fail(source, line, "a node line after the edge lines");
      Node node = parse_node(row, source, line);
      if (index.contains(node.id)) {
        fail(source, line,
             "node " + node.id + " declared again (first on line " +
                 std::to_string(nodes[index.at(node.id)].line) + ")");
      }
      if (nodes.size() == kMaxNodes) fail(source, line, "more than 65536 nodes");
      index.emplace(node.id, nodes.size());
      nodes.push_back(std::move(node));
      continue;
    }
    const std::vector<std::string_view> ends = split(trim(row), " -- ");
    if (ends.size() != 2) fail(source, line, "expected an edge '\\tFROM -- TO'");
    std::size_t at[2] = {0, 0};
    for (int e = 0; e < 2; ++e) {
      const std::string_view id = trim(ends[static_cast<std::size_t>(e)]);
      const auto found = index.find(id);
      if (found == index.end()) {
        fail(source, line, "edge names " + std::string(id) + ", not a node declared above");
      }
      at[e] = found->second;
    }
    if (at[0] == at[1]) fail(source, line, "edge from " + nodes[at[0]].id + " to itself");
    if (!seen.emplace(at[0], at[1]).second) {
      fail(source, line, "duplicate edge " + nodes[at[0]].id + " -- " + nodes[at[1]].id);
    }
    if (edges.size() == kMaxEdges) fail(source, line, "more than 1048576 edges");
    edges.emplace_back(at[0], at[1]);
  }
  if (nodes.empty()) fail(source, 0, "no nodes");

  const std::size_t n = nodes.size();
  std::vector<std::vector<std::size_t>> out(n), in(n);
  for (const auto& [from, to] : edges) {
    out[from].push_back(to);
    in[to].push_back(from);
  }
  // What PipeDream's optimizer drops: Input sources, then __getitem__ sinks.
  std::vector<char> dropped(n), input(n);
  for (std::size_t v = 0; v < n; ++v) {
    if (in[v].empty() && nodes[v].description.starts_with("Input")) dropped[v] = input[v] = 1;
  }
  for (std::size_t v = 0; v < n; ++v) {
    if (out[v].empty() && nodes[v].description.starts_with("__getitem__")) dropped[v] = 1;
  }

  // Kahn's algorithm, the smallest id first among the ready nodes.
  const auto later = [&](std::size_t a, std::size_t b) {
    return id_before(nodes[b].id, nodes[a].id);
  };
  std::priority_queue<std::size_t, std::vector<std::size_t>, decltype(later)> ready(later);
  std::vector<std::size_t> waiting(n);
  for (std::size_t v = 0; v < n; ++v) {
    waiting[v] = in[v].size();
    if (waiting[v] == 0) ready.push(v);
  }
  std::vector<std::size_t> order;
  while (!ready.empty()) {
    const std::size_t v = ready.top();
    ready.pop();
    order.push_back(v);
    for (const std::size_t w : out[v]) {
      if (--waiting[w] == 0) ready.push(w);
    }
  }
  if (order.size() != n) {
    for (std::size_t v = 0; v < n; ++v) {
      if (waiting[v] > 0) {
        fail(source, nodes[v].line, "the graph has a cycle through node " + nodes[v].id);
      }
    }
  }

  Profile profile;
  profile.model = "pipedream graph";
  profile.minibatch = minibatch;
  std::vector<int> position(n, kProfileModelInput);
  for (const std::size_t v : order) {
    if (dropped[v]) continue;
    position[v] = static_cast<int>(profile.layers.size());
    const Node& node = nodes[v];
    LayerProfile layer;
    layer.name = node.id + " " + node.description;
    layer.forward_ms = node.forward_ms;
    layer.backward_ms = node.backward_ms;
    layer.activation_bytes = node.activation;
    layer.memory_bytes = node.activation;
    layer.parameter_bytes = node.parameters;
    for (const std::size_t p : in[v]) {
      layer.inputs.push_back(position[p]);  // kProfileModelInput for an Input node
    }
    // A source that is not an Input reads nothing PipeDream charges: the model input.
    if (layer.inputs.empty()) layer.inputs.push_back(kProfileModelInput);
    std::sort(layer.inputs.begin(), layer.inputs.end());
    layer.inputs.erase(std::unique(layer.inputs.begin(), layer.inputs.end()), layer.inputs.end());
    profile.layers.push_back(std::move(layer));
  }
  if (profile.layers.empty()) fail(source, 0, "no nodes besides inputs and __getitem__ sinks");
  return profile;
}

Profile load_pipedream_graph(const std::filesystem::path& path, int minibatch) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open PipeDream profile");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_pipedream_graph(text.str(), path.string(), minibatch);
}

}  // namespace tandem::planner
