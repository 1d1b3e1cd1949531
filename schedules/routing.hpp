#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "schedules/action.hpp"
#include "schedules/action_list.hpp"
#include "schedules/schedule_params.hpp"

namespace tandem::schedules {

inline constexpr int kLoader = -1;  // the peer is the data loader

// What travels on an edge.
enum class Port : std::uint8_t { input, target, activation, gradient };
// "input", "target", "activation", "gradient".
const char* to_string(Port port);

// A tensor that a graph model's F on virtual stage `from` sends straight to F on virtual stage
// `to` (from < to), and, when `gradient`, whose gradient B on `to` sends straight back to B on
// `from`: no stage in between relays it. `item` says which tensor it is (the model's producing
// layer; the routing never interprets it). A tensor read on several later virtual stages has an
// edge to each.
struct TensorEdge {
  int from = 0;
  int to = 0;
  int item = 0;
  bool gradient = true;
  friend bool operator==(const TensorEdge&, const TensorEdge&) = default;
};

// One edge of an action: the peer action at the other end and the samples exchanged.
struct Route {
  int device = kLoader;  // peer device (ScheduleParams numbering) or kLoader
  Port port = Port::activation;
  Op op = Op::F;  // the peer action's op (F for activations, B for gradients); F for the loader
  int chunk = 0;  // the peer action's chunk (interleaved)
  std::int64_t minibatch = 0;  // (2BW: the batch)
  Slice slice;                 // the peer action's slice: the tag the message travels under
  Slice samples;  // the samples of it exchanged: intersection of the two actions' slices
  // Activations and gradients of a routing with tensor edges: the index of the edge in
  // Routing::edges() (it travels in the message's tag). 0 otherwise.
  std::uint16_t edge = 0;
  friend bool operator==(const Route&, const Route&) = default;
};

// Inputs and outputs of one action, each ordered by samples.
struct Routes {
  // F: upstream F's, or {kLoader, Port::input} on virtual stage 0, plus {kLoader, Port::target}
  // on the last virtual stage of a schedule that trains (not `forward`); B: downstream B's (none on
  // the last virtual stage: its gradient comes from its own loss); W, STEP: none; SYNC: the stage's
  // other replicas.
  std::vector<Route> inputs;
  // F: downstream F's (none on the last virtual stage); B: upstream B's (none on virtual stage
  // 0); SYNC: the stage's other replicas.
  std::vector<Route> outputs;
};

// The one answer to "from whom does this action's input come, to whom does its output go",
// shared by the simulator's dependency graph and the runtime's stage actors, so that a plan
// that simulates is a plan that runs. Virtual stage = ScheduleParams::virtual_stage (chunk * p +
// stage, or zb-v's V order); virtual stage i - 1 is upstream of virtual stage i. A stage's slicing
// of a minibatch is its forward partition for F and its backward partition for B (UMPIPE's
// compositions; m equal slices otherwise; the whole minibatch for PipeDream); an action exchanges
// with every peer action whose slice overlaps its own, the overlap being the samples sent.
class Routing {
 public:
  // Every generated kind, bounded or unbounded. Throws ScheduleError for invalid parameters
  // and for `custom` (which has no rule, only an order).
  explicit Routing(ScheduleParams params);
  // A graph model's routing: activations and gradients travel along `edges` (virtual stages),
  // one route per edge and peer action, instead of from each virtual stage to the next. Every
  // virtual stage but the first must receive at least one edge. Throws ScheduleError for edges
  // outside the virtual stages, not forward, or more than 65535.
  Routing(ScheduleParams params, std::vector<TensorEdge> edges);
  // Custom orders (any slicing, any replica placement): peers are the list's own actions.
  // Throws ScheduleError when two actions of a stage compute the same samples.
  explicit Routing(const ActionList& list);
  Routing(const ActionList& list, std::vector<TensorEdge> edges);

  const ScheduleParams& params() const { return params_; }
  // Empty for a chain (each virtual stage sends to the next).
  const std::vector<TensorEdge>& edges() const { return edges_; }

  // Clears `out` and fills it (no allocation once `out` has capacity): the hot path of the graph
  // builder and of the actors.
  void routes(int device, const Action& action, Routes& out) const;
  Routes routes(int device, const Action& action) const;
  // Only routes(...).inputs: what an action waits for (the graph builder's and an actor's
  // readiness check), without the cost of the outputs.
  void inputs(int device, const Action& action, std::vector<Route>& out) const;
  // Where the loader sends minibatch b: one Route per destination F (port input to virtual
  // stage 0, port target to the last virtual stage); `device` is the destination, `slice` the
  // destination action's slice.
  void loader_routes(std::int64_t minibatch, std::vector<Route>& out) const;
  // The device that runs F/B/W of (stage, chunk, minibatch, slice): replica b mod r_s for
  // PipeDream kinds, slice index mod r_s for flush schedules (the index in the stage's forward
  // partition). Throws ScheduleError when a list-built routing has no such action.
  int owner(int stage, int chunk, std::int64_t minibatch, Slice slice) const;
  // SYNC's all-reduce group: the devices of the stage's replicas, in order.
  std::vector<int> sync_group(int stage) const;

 private:
  // A list-built routing's view of one action: its minibatch, slice and device.
  struct Entry {
    std::int64_t minibatch;
    Slice slice;
    int device;
  };
  // How one virtual stage cuts a minibatch for one op: m equal slices (O(1) lookups), explicit
  // slices (UMPIPE), or, list-built, the list's own actions.
  struct Partition {
    std::int64_t equal = 0;      // > 0: that many equal slices of the minibatch
    std::int64_t size = 0;       // > 0: the equal slices' common size (m divides B)
    std::vector<Slice> slices;   // otherwise, ordered
    std::vector<Entry> entries;  // list-built: ordered by (minibatch, begin)
  };

  // (minibatch, sample): whether `entry` ends at or before it.
  static bool ends_before(const Entry& entry, const std::pair<std::int64_t, std::int64_t>& key);
  void place();  // device numbering and empty partitions, from params_
  void attach(std::vector<TensorEdge> edges);
  const Partition& partition(Op op, int vstage) const;
  // The device of the action of `part` holding `sample` of the minibatch; kLoader if none.
  int find_owner(const Partition& part, int stage, std::int64_t minibatch,
                 std::int64_t sample) const;
  // Appends a route to every action of `part` overlapping `slice` of minibatch b.
  void overlapping(const Partition& part, int vstage, Op op, Port port, std::int64_t minibatch,
                   Slice slice, std::vector<Route>& out) const;
  // Inline: once or twice per route on the hot path.
  int owner_by_index(int stage, std::int64_t minibatch, std::int64_t index) const {
    const int r = first_device_[stage + 1] - first_device_[stage];
    if (r == 1) return first_device_[stage];
    return first_device_[stage] +
           static_cast<int>((round_robin_minibatches_ ? minibatch : index) % r);
  }
  int stage_of(int device) const {
    if (device < 0 || device >= static_cast<int>(device_stage_.size())) bad_device(device);
    return device_stage_[device];
  }
  int vstage_of(int device, const Action& action) const {
    if (action.chunk < 0 || action.chunk >= params_.chunks) bad_chunk(device, action);
    return params_.virtual_stage(stage_of(device), action.chunk);
  }
  [[noreturn]] void bad_device(int device) const;
  [[noreturn]] void bad_chunk(int device, const Action& action) const;
  // The equal slice of `part` holding `sample`.
  std::int64_t equal_index(const Partition& part, std::int64_t sample) const;
  void sync_peers(int device, const Action& action, std::vector<Route>& out) const;
  // Routes along tensor edges: F's inputs (incoming edges), F's outputs (outgoing), B's inputs
  // (outgoing edges with a gradient), B's outputs (incoming with a gradient).
  void edge_routes(int vs, const Action& action, bool inputs, std::vector<Route>& out) const;

  ScheduleParams params_;
  bool from_list_ = false;
  bool round_robin_minibatches_ = false;  // PipeDream kinds: replica b mod r_s
  int virtual_stages_ = 0;
  std::int64_t samples_ = 0;
  std::vector<int> first_device_;              // per stage, plus the device count at the end
  std::vector<int> device_stage_;              // per device
  std::vector<Partition> forward_, backward_;  // per virtual stage
  std::vector<TensorEdge> edges_;
  std::vector<std::vector<std::uint16_t>> edges_in_, edges_out_;  // per virtual stage
};

}  // namespace tandem::schedules
