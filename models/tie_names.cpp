#include "models/tie_names.hpp"

namespace tandem::models {

std::string tie_param_name(const ModelSpec& spec, std::string_view name) {
  if (spec.name != "graph") return std::string(name);
  const std::vector<GraphNode>& nodes = spec.graph.nodes;
  // Longest first: a node "a.b" is meant by "a.b.weight" even when a node "a" exists.
  for (std::size_t dot = name.rfind('.'); dot != std::string_view::npos && dot > 0;
       dot = name.rfind('.', dot - 1)) {
    const std::string_view node = name.substr(0, dot);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].name == node) return std::to_string(i) + std::string(name.substr(dot));
    }
  }
  return std::string(name);
}

}  // namespace tandem::models
