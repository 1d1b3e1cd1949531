#include "actors/stage_edges.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace tandem::actors {

std::vector<schedules::TensorEdge> tensor_edges(
    const models::Model& model, const std::vector<schedules::LayerRange>& vstage_layers,
    bool relay) {
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
  // Relayed: (from, item) -> the farthest virtual stage that reads it.
  std::map<std::pair<int, int>, int> reach;
  for (std::size_t v = 1; v < vstage_layers.size(); ++v) {
    const schedules::LayerRange& r = vstage_layers[v];
    for (const int layer : model.range_inputs(r.begin, r.end)) {
      const int from = producer(layer);
      const bool gradient = layer != models::Model::kModelInput;
      if (!relay) {
        edges.push_back({from, static_cast<int>(v), layer, gradient});
        continue;
      }
      int& to = reach[{from, layer}];
      to = std::max(to, static_cast<int>(v));
    }
  }
  for (const auto& [key, to] : reach) {
    for (int v = key.first; v < to; ++v) {
      edges.push_back({v, v + 1, key.second, key.second != models::Model::kModelInput});
    }
  }
  return edges;
}

namespace {

// The edge that brings `item` to virtual stage `vs`, or -1.
int incoming(const std::vector<schedules::TensorEdge>& edges, int vs, int item) {
  for (std::size_t e = 0; e < edges.size(); ++e) {
    if (edges[e].to == vs && edges[e].item == item) return static_cast<int>(e);
  }
  return -1;
}

}  // namespace

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
    ce.relay_in.assign(edges.size(), -1);
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
      const int relayed = incoming(edges, vs, edges[e].item);
      if (it != ce.gives.end()) {
        const auto q = static_cast<std::size_t>(it - ce.gives.begin());
        ce.give_of_edge[e] = static_cast<int>(q);
        if (edges[e].gradient) ce.gradient_edges[q].push_back(static_cast<std::uint16_t>(e));
      } else if (relayed >= 0) {
        ce.relay_in[e] = relayed;
      } else if (edges[e].item != models::Model::kModelInput || vs != 0) {
        throw std::invalid_argument("virtual stage " + std::to_string(vs) + " sends layer " +
                                    std::to_string(edges[e].item) +
                                    "'s output, which it does "
                                    "not give");
      }
    }
    for (std::size_t e = 0; e < edges.size(); ++e) {
      if (edges[e].to == vs) ce.in_edges.push_back(static_cast<std::uint16_t>(e));
      if (edges[e].from == vs && edges[e].gradient) {
        ce.gradient_out.push_back(static_cast<std::uint16_t>(e));
      }
    }
    const auto last = std::find(ce.gives.begin(), ce.gives.end(), model.num_layers() - 1);
    if (last != ce.gives.end()) ce.loss_give = static_cast<int>(last - ce.gives.begin());
    for (std::vector<std::uint16_t>& g : ce.gradient_edges) {
      std::stable_sort(g.begin(), g.end(),
                       [&](std::uint16_t a, std::uint16_t b) { return edges[a].to > edges[b].to; });
    }
    chunks_.push_back(std::move(ce));
  }
}

namespace {

// sum + t through k; sim tensors (shapes only) are not added.
Tensor accumulate(Tensor sum, const Tensor& t, const models::Kernels& k) {
  if (!t.defined()) return sum;
  if (!sum.defined()) return t;
  if (t.device().is_sim()) return sum;
  Tensor next = k.empty(sum.shape());
  k.add(static_cast<const float*>(sum.raw_data()), static_cast<const float*>(t.raw_data()),
        static_cast<float*>(next.raw_data()), next.numel());
  return next;
}

}  // namespace

std::vector<Tensor> gather_reads(const ChunkEdges& ce, const EdgeTensors& arrived,
                                 const Tensor& loader_input) {
  std::vector<Tensor> reads;
  reads.reserve(ce.read_edge.size());
  for (const int e : ce.read_edge) {
    reads.push_back(e < 0 ? loader_input : arrived.at(static_cast<std::size_t>(e)));
  }
  return reads;
}

const Tensor& edge_output(const ChunkEdges& ce, std::size_t edge,
                          const std::vector<Tensor>& outputs, const EdgeTensors& arrived,
                          const Tensor& model_input) {
  const int q = ce.give_of_edge.at(edge);
  if (q >= 0) return outputs.at(static_cast<std::size_t>(q));
  const int relayed = ce.relay_in.at(edge);
  if (relayed >= 0) return arrived.at(static_cast<std::size_t>(relayed));
  return model_input;
}

std::vector<Tensor> output_gradients(const ChunkEdges& ce, const EdgeTensors& arrived,
                                     const Tensor& dlogits, const models::Kernels& k) {
  std::vector<Tensor> dys;
  dys.reserve(ce.gives.size());
  for (std::size_t q = 0; q < ce.gives.size(); ++q) {
    Tensor sum = static_cast<int>(q) == ce.loss_give ? dlogits : Tensor();
    for (const std::uint16_t e : ce.gradient_edges[q]) sum = accumulate(sum, arrived.at(e), k);
    dys.push_back(std::move(sum));
  }
  return dys;
}

EdgeTensors input_gradients(const ChunkEdges& ce, const std::vector<Tensor>& dxs,
                            const EdgeTensors& arrived, const models::Kernels& k) {
  EdgeTensors back(arrived.size());
  for (const std::uint16_t e : ce.gradient_out) {
    const int from = ce.relay_in[e];
    if (from >= 0)
      back[static_cast<std::size_t>(from)] =
          accumulate(back[static_cast<std::size_t>(from)], arrived[e], k);
  }
  for (const std::uint16_t e : ce.in_edges) {
    const int k_read = ce.read_of_edge[e];
    if (k_read >= 0) back[e] = accumulate(back[e], dxs.at(static_cast<std::size_t>(k_read)), k);
  }
  return back;
}

}  // namespace tandem::actors
