#include "schedules/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "schedules/detail/graph.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::schedules {
namespace {

enum : std::uint8_t { kNew = 0, kActive = 1, kDone = 2 };

[[noreturn]] void fail(const std::string& what) {
  throw ScheduleError("simulator: " + what);
}

}  // namespace

struct Simulator::State {
  void time_actions(const SimulationCosts& costs);
  void summarize(bool timeline);

  struct Frame {
    std::uint32_t id;
    std::uint32_t cursor;
    double ready;
  };
  // When `id` has ended: its messages' arrivals, on a graph's routing.
  void send_messages(std::uint32_t id, const SimulationCosts& costs);

  detail::Graph graph_;
  std::vector<StageCosts> per_vstage_;
  std::vector<TensorEdge> edges_;
  std::vector<double> duration_, transfer_, start_, end_, arrival_, link_free_;
  std::vector<double> message_arrival_;  // per message of the graph
  std::vector<std::uint8_t> visit_;      // kNew, kActive, kDone per action
  std::vector<Frame> stack_;
  SimulationResult result_;
};

Simulator::Simulator() : state_(std::make_unique<State>()) {}
Simulator::Simulator(Simulator&&) noexcept = default;
Simulator& Simulator::operator=(Simulator&&) noexcept = default;
Simulator::~Simulator() = default;

SimulationCosts SimulationCosts::uniform(int stages, double forward, double backward, double weight,
                                         double latency) {
  SimulationCosts costs;
  StageCosts stage;
  stage.forward = forward;
  stage.backward = backward;
  stage.weight = weight;
  costs.stages.assign(stages, stage);
  costs.latency = latency;
  return costs;
}

const SimulationResult& Simulator::run(const ActionList& list, const SimulationCosts& costs,
                                       bool timeline) {
  if (!state_) state_ = std::make_unique<State>();  // moved from
  State& st = *state_;
  auto& graph_ = st.graph_;
  auto& per_vstage_ = st.per_vstage_;
  auto& edges_ = st.edges_;
  edges_.clear();
  for (std::size_t e = 0; e < costs.edges.size(); ++e) {
    const EdgeBytes& eb = costs.edges[e];
    if (!(eb.bytes >= 0) || !std::isfinite(eb.bytes)) {
      fail("tensor edge " + std::to_string(e) + " (virtual stage " + std::to_string(eb.edge.from) +
           " to " + std::to_string(eb.edge.to) + ") has " + std::to_string(eb.bytes) +
           " bytes per sample; they must be finite and non-negative");
    }
    edges_.push_back(eb.edge);
  }
  detail::build_graph(list, graph_, edges_);
  const auto& p = list.params;
  const int V = graph_.virtual_stages;
  if (static_cast<int>(costs.stages.size()) == p.stages) {
    per_vstage_.resize(V);
    const double share = 1.0 / p.chunks;
    for (int vs = 0; vs < V; ++vs) {
      const StageCosts& c = costs.stages[p.stage_of_virtual(vs)];
      StageCosts& out = per_vstage_[vs];
      out = c;
      if (p.chunks > 1) {
        out.forward = c.forward.scaled(share);
        out.backward = c.backward.scaled(share);
        out.weight = c.weight.scaled(share);
        out.weight_bytes = c.weight_bytes * share;
        out.activation_bytes = c.activation_bytes * share;
        out.step = c.step * share;
      }
    }
  } else if (static_cast<int>(costs.stages.size()) == V) {
    per_vstage_ = costs.stages;
  } else {
    fail("costs describe " + std::to_string(costs.stages.size()) + " stages; the schedule has " +
         std::to_string(p.stages) + " stages of " + std::to_string(p.chunks) + " chunks");
  }
  if (!(costs.bandwidth > 0)) fail("bandwidth must be positive");
  if (!(costs.latency >= 0) || !(costs.sync >= 0) || !(costs.step >= 0)) {
    fail("latency, sync and step must be non-negative");
  }
  st.time_actions(costs);
  st.summarize(timeline);
  return st.result_;
}

void Simulator::State::time_actions(const SimulationCosts& costs) {
  const detail::Graph& g = graph_;
  const std::uint32_t n = g.size();
  const bool remat = g.list->params.rematerialize;
  // A graph's messages follow its tensor edges (send_messages), not the stages' outputs.
  const bool graph = !g.pred_message.empty();
  duration_.resize(n);
  transfer_.resize(n);
  for (std::uint32_t id = 0; id < n; ++id) {
    const int vs = g.vstage[id];
    const std::int64_t b = g.samples[id];
    double d = 0;
    double bytes = 0;
    switch (g.op[id]) {
      case Op::F:
        d = per_vstage_[vs].forward(b);
        bytes = per_vstage_[vs].output_bytes * static_cast<double>(b);
        break;
      case Op::B:
        d = per_vstage_[vs].backward(b);
        if (!g.split[vs]) d += per_vstage_[vs].weight(b);
        if (remat) d += per_vstage_[vs].forward(b);
        if (vs > 0) bytes = per_vstage_[vs - 1].output_bytes * static_cast<double>(b);
        break;
      case Op::W:
        d = per_vstage_[vs].weight(b);
        break;
      case Op::STEP: {
        d = costs.step;
        const int stage = g.device_stage[g.device[id]];
        for (int chunk = 0; chunk < g.chunks; ++chunk) {
          d += per_vstage_[g.list->params.virtual_stage(stage, chunk)].step;
        }
        break;
      }
      case Op::SYNC:
        d = costs.sync;
        break;
    }
    if (!(d >= 0) || !std::isfinite(d)) {
      fail("duration of " + detail::describe(g, id) + " is " + std::to_string(d));
    }
    duration_[id] = d;
    transfer_[id] = bytes > 0 && !graph ? bytes / costs.bandwidth : 0.0;
  }

  start_.resize(n);
  end_.resize(n);
  arrival_.resize(n);
  message_arrival_.resize(g.messages.size());
  visit_.assign(n, kNew);
  if (costs.contention) link_free_.assign(static_cast<std::size_t>(g.devices) * g.devices, 0.0);
  stack_.clear();
  // Depth-first over the dependencies, each action once: linear in actions + edges, and a
  // dependency found on the stack is a cycle, i.e. a deadlock.
  for (std::uint32_t root = 0; root < n; ++root) {
    if (visit_[root] == kDone) continue;
    visit_[root] = kActive;
    stack_.push_back({root, 0, 0.0});
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      const std::uint32_t id = f.id;
      const std::uint32_t first = g.pred_begin[id];
      const std::uint32_t on_device = g.first_on_device(id) ? 0 : 1;
      const std::uint32_t count = g.pred_begin[id + 1] - first + on_device;
      bool descended = false;
      while (f.cursor < count) {
        std::uint32_t src;
        bool no_delay;
        std::uint32_t message = detail::kNoMessage;
        if (f.cursor < on_device) {
          src = id - 1;
          no_delay = true;
        } else {
          const std::uint32_t k = first + f.cursor - on_device;
          const std::uint32_t raw = g.preds[k];
          src = raw & detail::kIdMask;
          no_delay = (raw & detail::kNoDelay) != 0;
          if (graph) message = g.pred_message[k];
        }
        if (visit_[src] == kDone) {
          const double arrival =
              message != detail::kNoMessage ? message_arrival_[message] : arrival_[src];
          f.ready = std::max(f.ready, no_delay ? end_[src] : arrival);
          ++f.cursor;
          continue;
        }
        if (visit_[src] == kActive) {
          throw ScheduleError("simulator: action list: " + detail::find_deadlock(g));
        }
        visit_[src] = kActive;
        stack_.push_back({src, 0, 0.0});  // invalidates f
        descended = true;
        break;
      }
      if (descended) continue;
      const double start = f.ready;
      const double end = start + duration_[id];
      start_[id] = start;
      end_[id] = end;
      visit_[id] = kDone;
      double arrival = end + transfer_[id];
      if (costs.contention && transfer_[id] > 0) {
        const int dest = g.dest[id];
        if (dest == -2) {
          fail("link contention needs one receiver per message, but " + detail::describe(g, id) +
               " feeds several devices");
        }
        if (dest >= 0) {
          double& free = link_free_[static_cast<std::size_t>(g.device[id]) * g.devices + dest];
          arrival = std::max(end, free) + transfer_[id];
          free = arrival;
        }
      }
      arrival_[id] = arrival + costs.latency;
      if (graph) send_messages(id, costs);
      stack_.pop_back();
    }
  }
}

// An action's messages leave when it ends, in its order (Graph::messages); with contention,
// each waits for the previous message of its link (sender's device, receiver's).
void Simulator::State::send_messages(std::uint32_t id, const SimulationCosts& costs) {
  const detail::Graph& g = graph_;
  const double end = end_[id];
  for (std::uint32_t m = g.message_begin[id]; m < g.message_begin[id + 1]; ++m) {
    const detail::Message& msg = g.messages[m];
    const double bytes = costs.edges[msg.edge].bytes * static_cast<double>(msg.samples);
    const double transfer = bytes > 0 ? bytes / costs.bandwidth : 0.0;
    double arrival = end + transfer;
    if (costs.contention && transfer > 0) {
      double& free = link_free_[static_cast<std::size_t>(g.device[id]) * g.devices + msg.dest];
      arrival = std::max(end, free) + transfer;
      free = arrival;
    }
    message_arrival_[m] = arrival + costs.latency;
  }
}

void Simulator::State::summarize(bool timeline) {
  const detail::Graph& g = graph_;
  const auto& p = g.list->params;
  SimulationResult& r = result_;
  const int D = g.devices;
  r.makespan = 0;
  r.busy.assign(D, 0.0);
  r.idle.assign(D, 0.0);
  r.peak_in_flight.assign(D, 0);
  r.peak_in_flight_samples.assign(D, 0);
  r.memory.assign(D, 0.0);
  r.timeline.clear();
  if (timeline) r.timeline.reserve(g.size());
  double total_busy = 0;
  for (int d = 0; d < D; ++d) {
    int in_flight = 0;
    std::int64_t samples = 0;
    double activations = 0;
    double peak_activations = 0;
    double& busy = r.busy[d];
    for (std::uint32_t id = g.device_begin[d]; id < g.device_begin[d + 1]; ++id) {
      busy += duration_[id];
      r.makespan = std::max(r.makespan, end_[id]);
      if (timeline) r.timeline.push_back({d, id - g.device_begin[d], start_[id], end_[id]});
      const int vs = g.vstage[id];
      const auto b = g.samples[id];
      const StageCosts& c = per_vstage_[vs];
      const double kept = (p.rematerialize ? c.input_bytes : c.activation_bytes) * b;
      // A forward-only F keeps nothing: its slice is out of flight once it has run.
      const bool releases = g.op[id] == Op::W || (g.op[id] == Op::B && !g.split[vs]) ||
                            (g.op[id] == Op::F && !trains(p.kind));
      if (g.op[id] == Op::F) {
        ++in_flight;
        samples += b;
        activations += kept;
      } else if (g.op[id] == Op::B && p.rematerialize) {
        // The recomputed activations of this slice exist while its B runs.
        peak_activations = std::max(peak_activations, activations + c.activation_bytes * b);
      }
      r.peak_in_flight[d] = std::max(r.peak_in_flight[d], in_flight);
      r.peak_in_flight_samples[d] = std::max(r.peak_in_flight_samples[d], samples);
      peak_activations = std::max(peak_activations, activations);
      if (releases) {
        --in_flight;
        samples -= b;
        activations -= kept;
      }
    }
    total_busy += busy;
    double weights = 0;
    const int stage = g.device_stage[d];
    for (int chunk = 0; chunk < g.chunks; ++chunk) {
      weights += per_vstage_[p.virtual_stage(stage, chunk)].weight_bytes;
    }
    r.memory[d] = weights * versions_kept(p, stage) + peak_activations;
  }
  for (int d = 0; d < D; ++d) r.idle[d] = r.makespan - r.busy[d];
  r.bubble = r.makespan > 0 ? 1.0 - total_busy / (D * r.makespan) : 0.0;
}

SimulationResult simulate(const ActionList& list, const SimulationCosts& costs, bool timeline) {
  Simulator sim;
  return sim.run(list, costs, timeline);
}

}  // namespace tandem::schedules
