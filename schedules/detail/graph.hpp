#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedules/action.hpp"
#include "schedules/action_list.hpp"
#include "schedules/routing.hpp"

namespace tandem::schedules::detail {

// A dependency edge whose source's end time counts as is: same device, or a SYNC's rendezvous
// (the all-reduce's cost is the SYNC's duration). Other edges wait for the message to arrive.
inline constexpr std::uint32_t kNoDelay = 0x80000000u;
inline constexpr std::uint32_t kIdMask = 0x7fffffffu;
// A dependency that waits for no message of its own (the source's arrival counts).
inline constexpr std::uint32_t kNoMessage = 0xffffffffu;

// A dependency: `target` waits for `source` (| kNoDelay) and, on a graph's routing (tensor
// edges), for the message `message` that carries the source's tensor to it.
struct Dependency {
  Dependency(std::uint32_t to, std::uint32_t from, std::uint32_t by = kNoMessage)
      : target(to), source(from), message(by) {}
  std::uint32_t target, source, message;
};

// On a graph's routing, what one route of one tensor edge carries between devices: the
// tensor (F) or its gradient (B) of `samples` samples, from action `source` to device `dest`.
struct Message {
  std::uint32_t source = 0;
  std::int32_t dest = 0;
  std::uint16_t edge = 0;  // index into Routing::edges()
  std::int64_t samples = 0;
};

// An action list compiled into a DAG: actions numbered device by device (id), dependencies in
// CSR form. The device order (id - 1 on the same device) is implicit. Buffers are reused
// across builds so that repeated simulation allocates nothing.
struct Graph {
  const ActionList* list = nullptr;
  int devices = 0;
  int stages = 0;
  int chunks = 1;
  int virtual_stages = 0;
  std::vector<int> device_stage;            // per device
  std::vector<std::uint32_t> device_begin;  // per device, plus the total at the end
  // Per action.
  std::vector<std::int32_t> device;
  std::vector<std::int32_t> vstage;  // F/B/W: params.virtual_stage(); STEP/SYNC: stage
  std::vector<Op> op;
  std::vector<std::int64_t> samples;
  std::vector<std::int32_t> dest;         // device that receives the output; -1 none, -2 several
  std::vector<std::uint32_t> pred_begin;  // size + 1
  std::vector<std::uint32_t> preds;       // source id | kNoDelay
  std::vector<std::uint8_t> split;        // per virtual stage: has W actions
  // A graph's routing only (empty for a chain): each cross-device dependency's message, one
  // per (source, target, tensor edge); messages by source, each source's in the order it sends
  // them (its outgoing edges in index order, each edge's peers by samples).
  std::vector<std::uint32_t> pred_message;   // parallel to preds: index into messages
  std::vector<Message> messages;             // by source
  std::vector<std::uint32_t> message_begin;  // per action, plus the total at the end

  // Scratch.
  struct Entry {
    std::int64_t minibatch, begin, end;
    std::uint32_t id;
  };
  std::vector<Entry> entries;
  std::vector<std::uint32_t> bucket_begin;
  std::vector<std::uint32_t> cursor;
  std::vector<Dependency> edges;
  std::vector<Message> unordered;  // messages as found, target by target
  std::vector<std::uint32_t> order;
  // Cross-stage edges come from the routing the runtime uses: the schedule's rule for generated
  // kinds, the list itself for custom orders.
  std::optional<Routing> routing;
  bool routing_from_list = false;  // custom orders: every action is where the routing says
  std::vector<Route> routes;

  std::uint32_t size() const { return device_begin.empty() ? 0 : device_begin.back(); }
  const Action& action(std::uint32_t id) const {
    const int d = device[id];
    return list->devices[d][id - device_begin[d]];
  }
  bool first_on_device(std::uint32_t id) const { return id == device_begin[device[id]]; }
};

// Throws ScheduleError when the list is malformed: wrong device count, a field out of range (a
// slice outside [0, samples) of its minibatch included), flags that contradict the schedule
// (with_weight, recompute), the same samples computed twice, an F without its B (or a split B
// without its W), a slice whose input the routing expects from an action that is not in the
// list (or on another device), a SYNC round that some replica of the stage lacks. With
// `edges` (a graph model's TensorEdges), activations and gradients follow
// Routing(params, edges) instead of the chain's routing, one message per route.
void build_graph(const ActionList& list, Graph& graph, const std::vector<TensorEdge>& edges = {});

// "d1 #4 B(mb 0, [3,4)) on stage 1".
std::string describe(const Graph& graph, std::uint32_t id);

// For a graph with a cycle: the first stuck action of every unfinished device and what it
// waits for. Empty when the order can complete.
std::string find_deadlock(const Graph& graph);

}  // namespace tandem::schedules::detail
