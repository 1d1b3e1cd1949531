#pragma once
// The messages of a running pipeline. Tensors ride beside the envelope; the envelope's tag says
// which minibatch, samples, port (Tag::kind) and chunk a tensor belongs to, so a stage finds an
// action's inputs by key; the body carries the tensor's dtype and shape, so variable shapes
// need no extra round trip to announce them.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/message.hpp"
#include "schedules/routing.hpp"

namespace tandem::actors {

// Dtype and shape of the tensor a message carries (up to rank 4), and for targets the number
// of loss rows in the whole minibatch (the loss of every slice is scaled by it).
struct TensorMeta {
  std::uint8_t dtype = 0;
  std::uint8_t rank = 0;
  std::uint16_t reserved = 0;
  std::int32_t dims[4] = {0, 0, 0, 0};
  std::uint32_t rows_total = 0;

  static TensorMeta of(const Tensor& t, std::uint32_t rows_total = 0) {
    if (t.rank() > 4) {
      throw std::invalid_argument("pipeline message: tensor " + t.describe() +
                                  " has rank > 4, which the envelope cannot describe");
    }
    TensorMeta m;
    m.dtype = static_cast<std::uint8_t>(t.dtype());
    m.rank = static_cast<std::uint8_t>(t.rank());
    for (int i = 0; i < t.rank(); ++i) m.dims[i] = static_cast<std::int32_t>(t.dim(i));
    m.rows_total = rows_total;
    return m;
  }
  bool describes(const Tensor& t) const {
    if (t.rank() != rank || static_cast<std::uint8_t>(t.dtype()) != dtype) return false;
    for (int i = 0; i < rank; ++i) {
      if (t.dim(i) != dims[i]) return false;
    }
    return true;
  }
};

// Activations and inputs travel on the forward lane, gradients on the backward lane.
struct ForwardTensor {
  static constexpr std::string_view kName = "pipeline.forward_tensor";
  static constexpr Lane kLane = Lane::forward;
  TensorMeta meta;
};
struct BackwardTensor {
  static constexpr std::string_view kName = "pipeline.backward_tensor";
  static constexpr Lane kLane = Lane::backward;
  TensorMeta meta;
};

// Control messages.
struct StartRun {
  static constexpr std::string_view kName = "pipeline.start";
};
// A device op (sim or CUDA) finished: the action numbered `seq` on this actor.
struct OpDone {
  static constexpr std::string_view kName = "pipeline.op_done";
  std::uint64_t seq;
};
struct SyncDone {
  static constexpr std::string_view kName = "pipeline.sync_done";
  std::int64_t round;
};
// The input stage hands an admission back to the loader.
struct Credit {
  static constexpr std::string_view kName = "pipeline.credit";
  std::int64_t minibatch;
};
// The last stage's loss over one slice (minibatch and samples in the tag).
struct LossReport {
  static constexpr std::string_view kName = "pipeline.loss";
  double loss_sum;
  std::int32_t rows;
  std::int32_t correct;
  std::uint32_t rows_total;  // loss rows of the whole minibatch: complete when all reported
};
// A stage's share of the gradient norm of one update round (the round in the tag's minibatch):
// the sum of squares of the gradients it updated with, before clipping. `stage` -1: the whole
// model's (a flush schedule's global norm, sent by device 0 alone); else that stage's own (an
// asynchronous schedule's, from its replica 0), which the coordinator adds in stage order.
struct GradNormReport {
  static constexpr std::string_view kName = "pipeline.grad_norm";
  double squares;
  std::int32_t stage;
};
// A forward-only run's last stage: the model's outputs for one slice (minibatch and samples in
// the tag), on the host, for the coordinator to assemble in sample order.
struct OutputTensor {
  static constexpr std::string_view kName = "pipeline.output_tensor";
  TensorMeta meta;
};
// Someone asked the run to stop (Pipeline::request_stop): to the loader, which picks the stop.
struct StopRequest {
  static constexpr std::string_view kName = "pipeline.stop_request";
};
// The loader's answer to every stage: the run ends after its first `minibatches` minibatches
// (a schedules::stop_boundary); actions of later ones are dropped.
struct StopAt {
  static constexpr std::string_view kName = "pipeline.stop_at";
  std::int64_t minibatches;
};
struct StageFinished {
  static constexpr std::string_view kName = "pipeline.stage_finished";
  std::int32_t device;
};

// Tag of a tensor sent along `r` (a sender's output route): minibatch, samples, port, and the
// receiver's chunk.
inline Tag tensor_tag(const schedules::Route& r) {
  Tag t;
  t.chunk = static_cast<std::uint8_t>(r.chunk);
  t.minibatch = r.minibatch;
  t.begin = static_cast<std::int32_t>(r.samples.begin);
  t.end = static_cast<std::int32_t>(r.samples.end);
  t.kind = static_cast<std::uint8_t>(r.port);
  t.aux = r.edge;  // which tensor edge of a graph model (0 for a chain)
  return t;
}

}  // namespace tandem::actors
