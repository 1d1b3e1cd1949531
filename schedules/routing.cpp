#include "schedules/routing.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "schedules/schedule_error.hpp"

namespace tandem::schedules {
namespace {

[[noreturn]] void fail(const ScheduleParams& p, const std::string& what) {
  throw ScheduleError("routing (" + std::string(to_string(p.kind)) + "): " + what);
}

std::vector<Slice> slices_of(const std::vector<std::int64_t>& sizes) {
  std::vector<Slice> out;
  out.reserve(sizes.size());
  std::int64_t begin = 0;
  for (auto size : sizes) {
    out.push_back({begin, begin + size});
    begin += size;
  }
  return out;
}

// "d3": built piece by piece, as GCC 12 warns (-Wrestrict) on "d" + std::to_string(...).
std::string device_name(int device) {
  std::string out(1, 'd');
  out += std::to_string(device);
  return out;
}

// Every sample of a minibatch: what the loader hands out.
constexpr Slice kEverything{0, std::numeric_limits<std::int64_t>::max()};

}  // namespace

const char* to_string(Port port) {
  switch (port) {
    case Port::input:
      return "input";
    case Port::target:
      return "target";
    case Port::activation:
      return "activation";
    case Port::gradient:
      return "gradient";
  }
  return "?";
}

bool Routing::ends_before(const Entry& entry, const std::pair<std::int64_t, std::int64_t>& key) {
  return entry.minibatch < key.first ||
         (entry.minibatch == key.first && entry.slice.end <= key.second);
}

Routing::Routing(ScheduleParams params) : params_(std::move(params)) {
  params_.validate();
  const ScheduleParams& p = params_;
  if (p.kind == ScheduleKind::custom) {
    fail(p, "a custom order has no routing rule: build the routing from its action list");
  }
  round_robin_minibatches_ =
      p.kind == ScheduleKind::pipedream || p.kind == ScheduleKind::pipedream_vsync;
  place();
  for (int vs = 0; vs < virtual_stages_; ++vs) {
    if (p.kind == ScheduleKind::umpipe) {
      forward_[vs].slices = slices_of(p.forward_composition(p.stage_of_virtual(vs)));
      backward_[vs].slices = slices_of(p.backward_composition(p.stage_of_virtual(vs)));
    } else {
      // PipeDream kinds have slices = 1: the whole minibatch.
      forward_[vs].equal = backward_[vs].equal = p.slices;
      if (samples_ % p.slices == 0) forward_[vs].size = backward_[vs].size = samples_ / p.slices;
    }
  }
}

Routing::Routing(ScheduleParams params, std::vector<TensorEdge> edges)
    : Routing(std::move(params)) {
  attach(std::move(edges));
}

Routing::Routing(const ActionList& list, std::vector<TensorEdge> edges) : Routing(list) {
  attach(std::move(edges));
}

void Routing::attach(std::vector<TensorEdge> edges) {
  if (edges.size() > 65535) fail(params_, std::to_string(edges.size()) + " tensor edges (> 65535)");
  edges_in_.assign(static_cast<std::size_t>(virtual_stages_), {});
  edges_out_.assign(static_cast<std::size_t>(virtual_stages_), {});
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const TensorEdge& e = edges[i];
    if (e.from < 0 || e.to >= virtual_stages_ || e.from >= e.to) {
      fail(params_, "tensor edge " + std::to_string(i) + " from virtual stage " +
                        std::to_string(e.from) + " to " + std::to_string(e.to) +
                        " does not go forward between the " + std::to_string(virtual_stages_) +
                        " virtual stages");
    }
    edges_out_[static_cast<std::size_t>(e.from)].push_back(static_cast<std::uint16_t>(i));
    edges_in_[static_cast<std::size_t>(e.to)].push_back(static_cast<std::uint16_t>(i));
  }
  for (int vs = 1; vs < virtual_stages_ && !edges.empty(); ++vs) {
    if (edges_in_[static_cast<std::size_t>(vs)].empty()) {
      fail(params_, "virtual stage " + std::to_string(vs) + " receives no tensor edge");
    }
  }
  edges_ = std::move(edges);
}

void Routing::edge_routes(int vs, const Action& action, bool inputs,
                          std::vector<Route>& out) const {
  const bool forward = action.op == Op::F;
  // F reads its incoming edges and writes its outgoing ones; B the other way round.
  const bool incoming = forward == inputs;
  for (const std::uint16_t i : (incoming ? edges_in_ : edges_out_)[static_cast<std::size_t>(vs)]) {
    const TensorEdge& e = edges_[i];
    if (!forward && !e.gradient) continue;
    const int peer = incoming ? e.from : e.to;
    const std::size_t first = out.size();
    overlapping(forward ? forward_[peer] : backward_[peer], peer, action.op,
                forward ? Port::activation : Port::gradient, action.minibatch, action.slice, out);
    for (std::size_t k = first; k < out.size(); ++k) out[k].edge = i;
  }
}

Routing::Routing(const ActionList& list) : params_(list.params) {
  params_.validate();
  const ScheduleParams& p = params_;
  from_list_ = true;
  place();
  if (list.devices.size() != device_stage_.size()) {
    fail(p, std::to_string(list.devices.size()) + " device orders for " +
                std::to_string(device_stage_.size()) + " devices");
  }
  for (int d = 0; d < static_cast<int>(list.devices.size()); ++d) {
    for (const Action& a : list.devices[d]) {
      if (a.op != Op::F && a.op != Op::B) continue;
      if (a.chunk < 0 || a.chunk >= p.chunks) {
        fail(p, device_name(d) + " " + to_string(a) + ": chunk outside [0," +
                    std::to_string(p.chunks) + ")");
      }
      const int vs = p.virtual_stage(device_stage_[d], a.chunk);
      (a.op == Op::F ? forward_ : backward_)[vs].entries.push_back({a.minibatch, a.slice, d});
    }
  }
  const auto less = [](const Entry& x, const Entry& y) {
    return std::tie(x.minibatch, x.slice.begin) < std::tie(y.minibatch, y.slice.begin);
  };
  for (auto* parts : {&forward_, &backward_}) {
    for (int vs = 0; vs < virtual_stages_; ++vs) {
      auto& entries = (*parts)[vs].entries;
      std::sort(entries.begin(), entries.end(), less);
      for (std::size_t i = 1; i < entries.size(); ++i) {
        const Entry& x = entries[i - 1];
        const Entry& y = entries[i];
        if (x.minibatch == y.minibatch && x.slice.end > y.slice.begin) {
          fail(p, device_name(y.device) + " and " + device_name(x.device) +
                      " both compute samples of minibatch " + std::to_string(y.minibatch) +
                      " at [" + std::to_string(y.slice.begin) + "," +
                      std::to_string(std::min(x.slice.end, y.slice.end)) + ") on virtual stage " +
                      std::to_string(vs));
        }
      }
    }
  }
}

void Routing::place() {
  const ScheduleParams& p = params_;
  virtual_stages_ = p.stages * p.chunks;
  samples_ = p.samples();
  first_device_.assign(p.stages + 1, 0);
  for (int s = 0; s < p.stages; ++s) first_device_[s + 1] = first_device_[s] + p.replicas_of(s);
  device_stage_.resize(first_device_.back());
  for (int s = 0; s < p.stages; ++s) {
    std::fill(device_stage_.begin() + first_device_[s],
              device_stage_.begin() + first_device_[s + 1], s);
  }
  forward_.resize(virtual_stages_);
  backward_.resize(virtual_stages_);
}

const Routing::Partition& Routing::partition(Op op, int vstage) const {
  return op == Op::F ? forward_[vstage] : backward_[vstage];
}

std::int64_t Routing::equal_index(const Partition& part, std::int64_t sample) const {
  if (part.size == 1) return sample;
  if (part.size > 0) return sample / part.size;
  // Slice i is [floor(i B / m), floor((i + 1) B / m)): the first to end after `sample` is
  // i = ceil((sample + 1) m / B) - 1.
  return ((sample + 1) * part.equal + samples_ - 1) / samples_ - 1;
}

void Routing::overlapping(const Partition& part, int vstage, Op op, Port port,
                          std::int64_t minibatch, Slice slice, std::vector<Route>& out) const {
  const int stage = params_.stage_of_virtual(vstage);
  const int chunk = params_.chunk_of_virtual(vstage);
  const auto emit = [&](Slice peer, int device) {
    out.push_back(Route{device, port, op, chunk, minibatch, peer,
                        Slice{std::max(peer.begin, slice.begin), std::min(peer.end, slice.end)}});
  };
  if (part.equal > 0) {
    const std::int64_t m = part.equal;
    const std::int64_t b = samples_;
    std::int64_t i = equal_index(part, std::max<std::int64_t>(0, slice.begin));
    for (; i < m; ++i) {
      // 64-bit divisions dominate this hot path: none when slices have a whole size.
      const Slice peer = part.size > 0 ? Slice{i * part.size, (i + 1) * part.size}
                                       : Slice{i * b / m, (i + 1) * b / m};
      if (peer.begin >= slice.end) break;
      emit(peer, owner_by_index(stage, minibatch, i));
    }
    return;
  }
  if (!from_list_) {
    const auto& s = part.slices;
    auto it = std::upper_bound(s.begin(), s.end(), slice.begin,
                               [](std::int64_t x, const Slice& y) { return x < y.end; });
    for (; it != s.end() && it->begin < slice.end; ++it) {
      emit(*it, owner_by_index(stage, minibatch, it - s.begin()));
    }
    return;
  }
  const auto& e = part.entries;
  auto it = std::lower_bound(e.begin(), e.end(), std::pair{minibatch, slice.begin}, ends_before);
  for (; it != e.end() && it->minibatch == minibatch && it->slice.begin < slice.end; ++it) {
    emit(it->slice, it->device);
  }
}

void Routing::bad_device(int device) const {
  fail(params_, "no device " + std::to_string(device) + " (there are " +
                    std::to_string(device_stage_.size()) + ")");
}

void Routing::bad_chunk(int device, const Action& action) const {
  fail(params_, device_name(device) + " " + to_string(action) + ": chunk outside [0," +
                    std::to_string(params_.chunks) + ")");
}

void Routing::sync_peers(int device, const Action& action, std::vector<Route>& out) const {
  const int stage = stage_of(device);
  for (int d = first_device_[stage]; d < first_device_[stage + 1]; ++d) {
    if (d != device) out.push_back({d, Port::gradient, Op::SYNC, 0, action.minibatch, {}, {}});
  }
}

void Routing::inputs(int device, const Action& action, std::vector<Route>& out) const {
  out.clear();
  if (action.op == Op::SYNC) {
    sync_peers(device, action, out);
    return;
  }
  if (action.op != Op::F && action.op != Op::B) return;
  const int vs = vstage_of(device, action);
  const int last = virtual_stages_ - 1;
  const std::int64_t b = action.minibatch;
  if (action.op == Op::F) {
    if (vs == 0) {
      out.push_back(Route{kLoader, Port::input, Op::F, 0, b, action.slice, action.slice});
    } else if (!edges_.empty()) {
      edge_routes(vs, action, true, out);
    } else {
      overlapping(forward_[vs - 1], vs - 1, Op::F, Port::activation, b, action.slice, out);
    }
    if (vs == last && trains(params_.kind)) {
      out.push_back(Route{kLoader, Port::target, Op::F, 0, b, action.slice, action.slice});
    }
  } else if (!edges_.empty()) {
    edge_routes(vs, action, true, out);
  } else if (vs < last) {
    overlapping(backward_[vs + 1], vs + 1, Op::B, Port::gradient, b, action.slice, out);
  }
}

void Routing::routes(int device, const Action& action, Routes& out) const {
  inputs(device, action, out.inputs);
  out.outputs.clear();
  if (action.op == Op::SYNC) {
    sync_peers(device, action, out.outputs);
    return;
  }
  if (action.op != Op::F && action.op != Op::B) return;
  const int vs = vstage_of(device, action);
  const std::int64_t b = action.minibatch;
  if (!edges_.empty()) {
    edge_routes(vs, action, false, out.outputs);
  } else if (action.op == Op::F) {
    if (vs + 1 < virtual_stages_) {
      overlapping(forward_[vs + 1], vs + 1, Op::F, Port::activation, b, action.slice, out.outputs);
    }
  } else if (vs > 0) {
    overlapping(backward_[vs - 1], vs - 1, Op::B, Port::gradient, b, action.slice, out.outputs);
  }
}

Routes Routing::routes(int device, const Action& action) const {
  Routes out;
  routes(device, action, out);
  return out;
}

void Routing::loader_routes(std::int64_t minibatch, std::vector<Route>& out) const {
  out.clear();
  overlapping(forward_[0], 0, Op::F, Port::input, minibatch, kEverything, out);
  if (!trains(params_.kind)) return;  // a forward-only run has no targets
  const int last = virtual_stages_ - 1;
  overlapping(forward_[last], last, Op::F, Port::target, minibatch, kEverything, out);
}

int Routing::owner(int stage, int chunk, std::int64_t minibatch, Slice slice) const {
  if (stage < 0 || stage >= params_.stages || chunk < 0 || chunk >= params_.chunks) {
    fail(params_, "no stage " + std::to_string(stage) + " chunk " + std::to_string(chunk));
  }
  const int vs = params_.virtual_stage(stage, chunk);
  for (Op op : {Op::F, Op::B}) {
    const int device = find_owner(partition(op, vs), stage, minibatch, slice.begin);
    if (device != kLoader) return device;
    if (!from_list_) break;
  }
  fail(params_, "no action on stage " + std::to_string(stage) + " chunk " + std::to_string(chunk) +
                    " computes samples [" + std::to_string(slice.begin) + "," +
                    std::to_string(slice.end) + ") of minibatch " + std::to_string(minibatch));
}

int Routing::find_owner(const Partition& part, int stage, std::int64_t minibatch,
                        std::int64_t sample) const {
  if (sample < 0 || (!from_list_ && sample >= samples_)) return kLoader;
  if (part.equal > 0) return owner_by_index(stage, minibatch, equal_index(part, sample));
  if (!from_list_) {
    const auto& s = part.slices;
    const auto it = std::upper_bound(s.begin(), s.end(), sample,
                                     [](std::int64_t x, const Slice& y) { return x < y.end; });
    return it == s.end() ? kLoader : owner_by_index(stage, minibatch, it - s.begin());
  }
  const auto& e = part.entries;
  const auto it = std::lower_bound(e.begin(), e.end(), std::pair{minibatch, sample}, ends_before);
  if (it == e.end() || it->minibatch != minibatch || it->slice.begin > sample) return kLoader;
  return it->device;
}

std::vector<int> Routing::sync_group(int stage) const {
  if (stage < 0 || stage >= params_.stages) {
    fail(params_, "no stage " + std::to_string(stage));
  }
  std::vector<int> out;
  for (int d = first_device_[stage]; d < first_device_[stage + 1]; ++d) out.push_back(d);
  return out;
}

}  // namespace tandem::schedules
