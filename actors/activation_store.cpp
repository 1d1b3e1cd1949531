#include "actors/activation_store.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <utility>

#include "models/concat_rows.hpp"

namespace tandem::actors {
namespace {

// Rows [lo, hi) of a tensor whose row 0 is sample `first`.
Tensor rows(const Tensor& t, std::int64_t first, std::int64_t lo, std::int64_t hi) {
  if (lo == first && hi - lo == t.dim(0)) return t;
  return t.slice(lo - first, hi - first);
}

std::size_t bytes_of(const Tensor& t) {
  return t.defined() ? t.nbytes() : 0;
}

}  // namespace

ActivationStore::ActivationStore(const models::Model* model,
                                 std::vector<schedules::LayerRange> chunk_layers)
    : model_(model), chunk_layers_(std::move(chunk_layers)) {}

std::string ActivationStore::name(const char* what, int chunk, std::int64_t minibatch,
                                  schedules::Slice slice) {
  std::string out = what;
  out += " chunk ";
  out += std::to_string(chunk);
  out += " minibatch ";
  out += std::to_string(minibatch);
  out += " samples ";
  out += schedules::to_string(slice);
  return out;
}

const schedules::LayerRange& ActivationStore::layers(int chunk) const {
  return chunk_layers_.at(static_cast<std::size_t>(chunk));
}

void ActivationStore::keep(int chunk, std::int64_t minibatch, KeptForward f) {
  const Key key{chunk, minibatch, f.slice.begin};
  if (forwards_.contains(key)) {
    throw std::logic_error(name("a forward is already kept for", chunk, minibatch, f.slice));
  }
  Kept kept;
  for (const models::Saved& layer : f.saved) {
    for (const Tensor& t : layer) kept.bytes += bytes_of(t);
  }
  kept.bytes += bytes_of(f.input) + bytes_of(f.dlogits);
  for (const Tensor& t : f.inputs) kept.bytes += bytes_of(t);
  kept.forward = std::move(f);
  bytes_ += kept.bytes;
  forwards_.emplace(key, std::move(kept));
  peak_ = std::max(peak_, forwards_.size());
}

BackwardState ActivationStore::take_for_backward(int chunk, std::int64_t minibatch,
                                                 schedules::Slice slice) {
  // Usually exactly one forward with the same slice; UMPIPE may slice backward differently.
  // A minibatch's forwards cover disjoint samples, keyed by their first: the overlapping ones
  // start at the last forward beginning at or before the slice (found in log time, as a deep
  // pipeline keeps as many forwards of one minibatch as it has stages) and run while they
  // begin before its end.
  std::vector<std::map<Key, Kept>::iterator> parts;
  const auto of_this = [&](std::map<Key, Kept>::iterator i) {
    return std::get<0>(i->first) == chunk && std::get<1>(i->first) == minibatch;
  };
  auto at = forwards_.upper_bound({chunk, minibatch, slice.begin});
  if (at != forwards_.begin() && of_this(std::prev(at))) --at;
  for (; at != forwards_.end() && of_this(at) && at->second.forward.slice.begin < slice.end; ++at) {
    if (at->second.forward.slice.overlaps(slice)) parts.push_back(at);
  }
  if (parts.empty()) {
    throw std::logic_error(name("no forward kept for backward of", chunk, minibatch, slice));
  }
  BackwardState out;
  KeptForward& first = parts.front()->second.forward;
  out.version = first.version;
  out.recompute = first.recompute;
  if (parts.size() == 1 && first.slice == slice) {
    out.saved = std::move(first.saved);
    out.input = first.input;
    out.inputs = first.inputs;
    out.dlogits = first.dlogits;
  } else {
    if (out.recompute) {
      throw std::logic_error(name(
          "re-materialization needs equal forward and backward slices:", chunk, minibatch, slice));
    }
    const schedules::LayerRange& l = layers(chunk);
    for (const auto& it : parts) {
      const KeptForward& f = it->second.forward;
      const std::int64_t lo = std::max(f.slice.begin, slice.begin);
      const std::int64_t hi = std::min(f.slice.end, slice.end);
      if (lo == f.slice.begin && hi == f.slice.end) {
        out.pieces.push_back(f.saved);
      } else {
        out.pieces.push_back(model_->slice_saved(f.saved, l.begin, l.end, f.slice.size(),
                                                 lo - f.slice.begin, hi - f.slice.begin));
      }
      out.sizes.push_back(hi - lo);
      if (f.dlogits.defined()) out.dlogits_pieces.push_back(rows(f.dlogits, f.slice.begin, lo, hi));
    }
  }
  // A forward whose every sample has gone back is done.
  for (const auto& it : parts) {
    Kept& k = it->second;
    k.consumed +=
        std::min(k.forward.slice.end, slice.end) - std::max(k.forward.slice.begin, slice.begin);
    if (k.consumed >= k.forward.slice.size()) {
      out.released.push_back(k.forward.version);
      bytes_ -= k.bytes;
      forwards_.erase(it);
    }
  }
  return out;
}

void ActivationStore::join(int chunk, BackwardState& state, const models::Kernels& k) const {
  if (state.pieces.empty()) return;
  const schedules::LayerRange& l = layers(chunk);
  state.saved = model_->concat_saved(state.pieces, state.sizes, l.begin, l.end, k);
  if (!state.dlogits_pieces.empty()) state.dlogits = models::concat_rows(k, state.dlogits_pieces);
}

void ActivationStore::keep_pending_weight(int chunk, std::int64_t minibatch, schedules::Slice slice,
                                          PendingWeight w) {
  if (!pending_.emplace(Key{chunk, minibatch, slice.begin}, std::move(w)).second) {
    throw std::logic_error(
        name("a split backward is already kept for W of", chunk, minibatch, slice));
  }
}

PendingWeight ActivationStore::take_pending_weight(int chunk, std::int64_t minibatch,
                                                   schedules::Slice slice) {
  auto it = pending_.find({chunk, minibatch, slice.begin});
  if (it == pending_.end()) {
    throw std::logic_error(name("no split backward kept for W of", chunk, minibatch, slice));
  }
  PendingWeight w = std::move(it->second);
  pending_.erase(it);
  return w;
}

}  // namespace tandem::actors
