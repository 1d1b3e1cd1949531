#pragma once
// What a stage replica of a graph model reads and gives, per chunk: which tensor edge
// (schedules::TensorEdge) brings each of its layer range's inputs, which of its range's outputs
// each outgoing edge carries, and which edges bring each output's gradient back. Built once
// from the model, the chunk's layers and the routing's edges; empty for a chain.
#include <cstdint>
#include <vector>

#include "models/model.hpp"
#include "schedules/plan.hpp"
#include "schedules/routing.hpp"

namespace tandem::actors {

struct ChunkEdges {
  std::vector<int> reads;  // Model::range_inputs of the chunk's layers
  std::vector<int> gives;  // Model::range_outputs
  // Per read: the edge that brings it, or -1 for the loader's input (virtual stage 0).
  std::vector<int> read_edge;
  // Per outgoing edge (index into routing edges): the position in `gives` of what it carries, or
  // -1 for the model input (sent on from virtual stage 0).
  std::vector<int> give_of_edge;
  // Per incoming edge (index into routing edges): the position in `reads` of what it brings, or
  // -1 (its gradient goes back along it).
  std::vector<int> read_of_edge;
  // Relayed tensors: per outgoing edge, the incoming edge whose tensor it sends on (its
  // gradient coming back the other way), or -1.
  std::vector<int> relay_in;
  std::vector<std::uint16_t> in_edges;      // what F takes: every edge to this virtual stage
  std::vector<std::uint16_t> gradient_out;  // what B takes: outgoing edges with a gradient
  int loss_give = -1;  // the position in `gives` of the model's last layer (the loss's input)
  // Per give: the edges that bring its gradient back, the later virtual stage's first (the
  // order in which the whole model sums a tensor's gradients).
  std::vector<std::vector<std::uint16_t>> gradient_edges;
};

// Per edge (an index into the routing's edges), a tensor; undefined where the chunk has none.
using EdgeTensors = std::vector<Tensor>;

// The range's inputs in `reads` order, from the edges that bring them (the loader's input for
// virtual stage 0's model input).
std::vector<Tensor> gather_reads(const ChunkEdges& ce, const EdgeTensors& arrived,
                                 const Tensor& loader_input);
// What outgoing edge `edge` carries: a range output, a relayed tensor, or the model input.
const Tensor& edge_output(const ChunkEdges& ce, std::size_t edge,
                          const std::vector<Tensor>& outputs, const EdgeTensors& arrived,
                          const Tensor& model_input);
// The gradient of each of the range's outputs: the gradients its readers sent back, summed in
// order through `k` (inside the backward's device work), and the loss's `dlogits`.
std::vector<Tensor> output_gradients(const ChunkEdges& ce, const EdgeTensors& arrived,
                                     const Tensor& dlogits, const models::Kernels& k);
// What goes back along each incoming edge with a gradient: the gradients of what this stage
// relayed (from later readers, so first) plus the range's own input gradient `dxs`.
EdgeTensors input_gradients(const ChunkEdges& ce, const std::vector<Tensor>& dxs,
                            const EdgeTensors& arrived, const models::Kernels& k);

class StageEdges {
 public:
  StageEdges() = default;
  // `vstages`: the virtual stage of each chunk. Throws std::invalid_argument when the routing's
  // edges do not bring what the chunk's layers read.
  StageEdges(const models::Model& model, const std::vector<schedules::LayerRange>& chunk_layers,
             const std::vector<int>& vstages, const schedules::Routing& routing);

  bool graph() const { return !chunks_.empty(); }
  const ChunkEdges& chunk(int c) const { return chunks_.at(static_cast<std::size_t>(c)); }

 private:
  std::vector<ChunkEdges> chunks_;
};

// The tensor edges of a graph model cut into `vstage_layers` (the layers of each virtual stage,
// in order): one per (producing virtual stage, reading virtual stage, tensor), the tensor being
// the producing layer, or Model::kModelInput (read after virtual stage 0, sent on by it, without
// a gradient). With `relay`, a tensor goes from each virtual stage to the next until its last
// reader instead (one edge per tensor and cut it crosses). Empty for a chain.
std::vector<schedules::TensorEdge> tensor_edges(
    const models::Model& model, const std::vector<schedules::LayerRange>& vstage_layers,
    bool relay = false);

}  // namespace tandem::actors
