#pragma once
// What a stage replica's forwards keep for their backwards, by chunk, minibatch and first
// sample, and what a split backward keeps for its W. A backward takes the kept forwards its
// samples cover: one of the same slice as it was kept, or (UMPIPE slices a stage's backward
// differently from its forward) pieces of several, cut to its samples here and joined in sample
// order inside the backward's device work (join). A forward is dropped once all its samples went
// back. The bytes forwards keep are counted for the replica's peak memory.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "models/kernels/kernels.hpp"
#include "models/layer.hpp"
#include "models/model.hpp"
#include "runtime/tensor.hpp"
#include "schedules/action.hpp"
#include "schedules/plan.hpp"

namespace tandem::actors {

// What a forward keeps for its backward.
struct KeptForward {
  schedules::Slice slice;
  std::vector<models::Saved> saved;  // each layer's state (none when re-materialized)
  Tensor input;                      // re-materialization: all that is kept
  std::vector<Tensor> inputs;        // a graph model's re-materialization: every input
  Tensor dlogits;                    // last virtual stage: gradient of the loss
  std::int64_t version = 0;          // the weight version the forward ran with
  bool recompute = false;
};

// What a backward takes from the kept forwards.
struct BackwardState {
  std::int64_t version = 0;  // the weight version of the first forward it covers
  bool recompute = false;
  // Each layer's state and the gradient of the loss (last virtual stage) over the backward's
  // samples; the input of a re-materialized forward.
  std::vector<models::Saved> saved;
  Tensor dlogits;
  Tensor input;
  std::vector<Tensor> inputs;  // a graph model's re-materialized forward: every input
  // A backward slice across forward slices: the pieces cut to its samples, in sample order,
  // with their sample counts, that join() turns into `saved` and `dlogits`. Empty when one
  // forward of the same slice was taken as it was kept.
  std::vector<std::vector<models::Saved>> pieces;
  std::vector<std::int64_t> sizes;
  std::vector<Tensor> dlogits_pieces;
  // The weight versions of the forwards this backward finished (all their samples went back).
  std::vector<std::int64_t> released;
};

// What a split backward keeps for its W.
struct PendingWeight {
  std::vector<models::Saved> saved;
  std::int64_t version = 0;
};

class ActivationStore {
 public:
  // How saved state is cut and joined: `model`'s layers, those of each chunk.
  ActivationStore(const models::Model* model, std::vector<schedules::LayerRange> chunk_layers);

  // Keeps forward `f` of `minibatch` on `chunk`. Throws std::logic_error naming the key when a
  // forward of that chunk, minibatch and first sample is already kept.
  void keep(int chunk, std::int64_t minibatch, KeptForward f);
  // What backward of `slice` of `minibatch` on `chunk` needs, from the kept forwards that
  // overlap it; the parts of forwards it covers count as gone back. Throws std::logic_error
  // naming the key when no kept forward overlaps it, or when it would cut a re-materialized
  // forward (which keeps only its input), before anything is taken.
  BackwardState take_for_backward(int chunk, std::int64_t minibatch, schedules::Slice slice);
  // Joins state.pieces into state.saved and state.dlogits through `k` (inside the backward's
  // device work: a device's copies are ordered after the forwards that wrote the pieces);
  // nothing when there are no pieces.
  void join(int chunk, BackwardState& state, const models::Kernels& k) const;

  // Keeps what split backward `slice` of `minibatch` on `chunk` leaves for its W. Throws
  // std::logic_error naming the key when one is already kept there.
  void keep_pending_weight(int chunk, std::int64_t minibatch, schedules::Slice slice,
                           PendingWeight w);
  // Removes and returns it; throws std::logic_error naming the key when there is none.
  PendingWeight take_pending_weight(int chunk, std::int64_t minibatch, schedules::Slice slice);

  std::size_t size() const { return forwards_.size(); }  // forwards kept
  std::size_t peak() const { return peak_; }             // forwards kept at once
  std::size_t bytes() const { return bytes_; }           // kept by forwards now
  std::size_t pending_weights() const { return pending_.size(); }

 private:
  using Key = std::tuple<int, std::int64_t, std::int64_t>;  // chunk, minibatch, first sample
  struct Kept {
    KeptForward forward;
    std::int64_t consumed = 0;  // samples whose backward ran
    std::size_t bytes = 0;      // what it keeps
  };
  const schedules::LayerRange& layers(int chunk) const;
  static std::string name(const char* what, int chunk, std::int64_t minibatch,
                          schedules::Slice slice);

  const models::Model* model_;
  std::vector<schedules::LayerRange> chunk_layers_;
  std::map<Key, Kept> forwards_;
  std::map<Key, PendingWeight> pending_;
  std::size_t bytes_ = 0;
  std::size_t peak_ = 0;
};

}  // namespace tandem::actors
