#include "actors/stage_edges.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem::actors {

std::vector<schedules::TensorEdge> tensor_edges(
    const models::Model& model, const std::vector<schedules::LayerRange>& vstage_layers) {
  std::vector<schedules::TensorEdge> edges;
  if (model.is_chain()) return edges;
  auto producer = [&](int layer) {
    if (layer == models::Model::kModelInput) return 0;
    for (std::size_t v = 0; v < vstage_layers.size(); ++v) {
      if (layer >= vstage_layers[v].begin && layer < vstage_layers[v].end) {
        return static_cast<int>(v);
      }
    }
    throw std::invalid_argument("tensor edges: layer " + std::to_string(layer) +
                                " is on no virtual stage");
  };
  for (std::size_t v = 1; v < vstage_layers.size(); ++v) {
    const schedules::LayerRange& r = vstage_layers[v];
    for (const int layer : model.range_inputs(r.begin, r.end)) {
      edges.push_back(
          {producer(layer), static_cast<int>(v), layer, layer != models::Model::kModelInput});
    }
  }
  return edges;
}

StageEdges::StageEdges(const models::Model& model,
                       const std::vector<schedules::LayerRange>& chunk_layers,
                       const std::vector<int>& vstages, const schedules::Routing& routing) {
  const std::vector<schedules::TensorEdge>& edges = routing.edges();
  if (edges.empty()) return;
  for (std::size_t c = 0; c < chunk_layers.size(); ++c) {
    const schedules::LayerRange& r = chunk_layers[c];
    const int vs = vstages.at(c);
    ChunkEdges ce;
    ce.reads = model.range_inputs(r.begin, r.end);
    ce.gives = model.range_outputs(r.begin, r.end);
    ce.give_of_edge.assign(edges.size(), -1);
    ce.read_of_edge.assign(edges.size(), -1);
    ce.gradient_edges.resize(ce.gives.size());
    for (const int read : ce.reads) {
      int found = -1;
      for (std::size_t e = 0; e < edges.size(); ++e) {
        if (edges[e].to == vs && edges[e].item == read) found = static_cast<int>(e);
      }
      if (found < 0 && !(vs == 0 && read == models::Model::kModelInput)) {
        throw std::invalid_argument("virtual stage " + std::to_string(vs) + " reads layer " +
                                    std::to_string(read) + "'s output, which no edge brings");
      }
      if (found >= 0) {
        ce.read_of_edge[static_cast<std::size_t>(found)] = static_cast<int>(ce.read_edge.size());
      }
      ce.read_edge.push_back(found);
    }
    for (std::size_t e = 0; e < edges.size(); ++e) {
      if (edges[e].from != vs) continue;
      const auto it = std::find(ce.gives.begin(), ce.gives.end(), edges[e].item);
      if (it != ce.gives.end()) {
        const auto q = static_cast<std::size_t>(it - ce.gives.begin());
        ce.give_of_edge[e] = static_cast<int>(q);
        if (edges[e].gradient) ce.gradient_edges[q].push_back(static_cast<std::uint16_t>(e));
      } else if (edges[e].item != models::Model::kModelInput || vs != 0) {
        throw std::invalid_argument("virtual stage " + std::to_string(vs) + " sends layer " +
                                    std::to_string(edges[e].item) +
                                    "'s output, which it does "
                                    "not give");
      }
    }
    for (std::vector<std::uint16_t>& g : ce.gradient_edges) {
      std::stable_sort(g.begin(), g.end(),
                       [&](std::uint16_t a, std::uint16_t b) { return edges[a].to > edges[b].to; });
    }
    chunks_.push_back(std::move(ce));
  }
}

}  // namespace tandem::actors
