#include "apps/trace_summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "schedules/schedule.hpp"
#include "schedules/schedule_kind.hpp"
#include "schedules/simulator.hpp"
#include "schedules/text_form.hpp"
#include "train/pipeline_trace.hpp"
#include "train/trace_file.hpp"

namespace tandem::apps {
namespace {

using schedules::Op;

struct Slice {
  Op op = Op::F;
  std::int64_t minibatch = 0;
  std::int64_t samples = 0;
  int chunk = 0;
  double start = 0, end = 0;  // seconds
};

struct Track {
  std::string kind;  // stage, loader, coordinator
  int device = -1, stage = 0, replica = 0;
  std::string placement;
  std::vector<Slice> slices;
};

Op parse_op(const std::string& text, const std::string& where) {
  for (Op op : {Op::F, Op::B, Op::W, Op::STEP, Op::SYNC}) {
    if (text == schedules::to_string(op)) return op;
  }
  throw std::runtime_error(where + ": unknown op '" + text + "'");
}

// A duration model fitted to (samples, seconds) pairs: the mean when every slice has the same
// size, else proportional to the samples.
struct Fit {
  double mean = 0;
  double per_sample = 0;
  bool proportional = false;
  std::int64_t count = 0;

  static Fit of(const std::vector<std::pair<std::int64_t, double>>& xs) {
    Fit f;
    f.count = static_cast<std::int64_t>(xs.size());
    if (xs.empty()) return f;
    double total = 0;
    std::int64_t samples = 0;
    bool same = true;
    for (const auto& [b, d] : xs) {
      total += d;
      samples += b;
      same = same && b == xs.front().first;
    }
    f.mean = total / static_cast<double>(xs.size());
    f.proportional = !same && samples > 0;
    f.per_sample = samples > 0 ? total / static_cast<double>(samples) : 0;
    return f;
  }
  double operator()(std::int64_t b) const {
    return proportional ? per_sample * static_cast<double>(b) : mean;
  }
};

// Time per update round: per device, the STEP ends after the first quarter of them, averaged
// over devices; nullopt when no device has two STEPs to measure between.
std::optional<double> steady_step(const std::vector<std::vector<double>>& step_ends) {
  double sum = 0;
  int n = 0;
  for (std::vector<double> ends : step_ends) {
    if (ends.size() < 2) continue;
    std::sort(ends.begin(), ends.end());
    const std::size_t skip = ends.size() >= 4 ? ends.size() / 4 : 0;
    const std::size_t rounds = ends.size() - 1 - skip;
    sum += (ends.back() - ends[skip]) / static_cast<double>(rounds);
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

// A rank's own trace holds only the stages that ran in it: its figures would not be the job's.
// A merged trace says which ranks it holds and on which clock.
template <class Fail>
void read_job(const nlohmann::json& meta, TraceSummary& out, const Fail& fail) {
  if (meta.contains("process")) {
    const nlohmann::json& p = meta["process"];
    const auto field = [&p](const char* key) {
      return p.is_object() && p.contains(key) ? p[key].dump() : std::string("?");
    };
    fail("the trace of rank " + field("rank") + " of a " + field("world_size") +
         "-process job, which holds only that rank's stages; merge every rank's trace with "
         "`tandem trace merge OUT RANK_TRACES...` and summarize OUT");
  }
  if (!meta.contains("job")) return;
  const nlohmann::json& job = meta["job"];
  try {
    out.processes = job.at("world_size").get<int>();
    out.clock = job.at("clock").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("tandem.job: ") + e.what());
  }
}

std::string ms(double seconds) {
  return fmt::format("{:.3f}", seconds * 1e3);
}

}  // namespace

TraceSummary summarize_trace(const nlohmann::json& trace, const std::string& source) {
  const auto fail = [&](const std::string& what) -> void {
    throw std::runtime_error(source + ": " + what);
  };
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    fail("not a Chrome trace (no \"traceEvents\" array)");
  }
  if (!trace.contains("tandem") || !trace["tandem"].is_object()) {
    fail(
        "not a tandem pipeline trace (no \"tandem\" object; record one with `tandem train "
        "--trace FILE`)");
  }
  const nlohmann::json& meta = trace["tandem"];
  TraceSummary out;
  out.source = source;
  read_job(meta, out, fail);
  std::optional<schedules::ActionList> list;
  try {
    if (!meta.contains("schedule")) fail("tandem.schedule is missing");
    out.schedule = train::schedule_from_json(meta["schedule"]);
    if (meta.contains("order")) {
      list = schedules::parse_actions(meta["order"].get<std::string>());
    } else {
      out.schedule.validate();
      if (out.schedule.minibatches < 1) fail("tandem.schedule.minibatches must be >= 1");
      // The schedule is materialized to simulate it: one that would hold far more actions than
      // the trace has events is not the schedule of this trace.
      const double actions = static_cast<double>(out.schedule.minibatches) *
                             std::max(1, out.schedule.slices) * out.schedule.stages *
                             out.schedule.chunks * 2.0;
      if (actions > 4.0 * static_cast<double>(trace["traceEvents"].size()) + 1e5) {
        fail("tandem.schedule describes " + std::to_string(out.schedule.minibatches) +
             " minibatches, far more than the trace's events hold");
      }
      list = schedules::Schedule(out.schedule).materialize();
    }
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("tandem: ") + e.what());
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    if (what.rfind(source + ": ", 0) == 0) throw;
    fail(what);
  }
  const schedules::ScheduleParams& p = list->params;
  const int R = p.total_replicas();
  const int V = p.stages * p.chunks;

  std::map<std::int64_t, Track> tracks;
  if (!meta.contains("tracks") || !meta["tracks"].is_array()) fail("tandem.tracks is missing");
  for (const nlohmann::json& t : meta["tracks"]) {
    try {
      Track tr;
      tr.kind = t.at("kind").get<std::string>();
      if (tr.kind == "stage") {
        tr.device = t.at("device").get<int>();
        tr.stage = t.at("stage").get<int>();
        tr.replica = t.at("replica").get<int>();
        tr.placement = t.value("placement", "");
        if (tr.device < 0 || tr.device >= R) {
          fail("tandem.tracks: device " + std::to_string(tr.device) + " is not in the plan's " +
               std::to_string(R) + " replicas");
        }
      }
      tracks[t.at("tid").get<std::int64_t>()] = std::move(tr);
    } catch (const nlohmann::json::exception& e) {
      fail("tandem.tracks: " + std::string(e.what()));
    }
  }

  struct FlowEnd {
    std::int64_t tid = -1;
    double ts = 0;
  };
  std::map<std::uint64_t, std::pair<FlowEnd, FlowEnd>> flows;
  std::size_t index = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const std::string where = "traceEvents[" + std::to_string(index++) + "]";
    try {
      const std::string ph = e.at("ph").get<std::string>();
      if (ph == "s" || ph == "f") {
        auto& f = flows[e.at("id").get<std::uint64_t>()];
        (ph == "s" ? f.first : f.second) = {e.at("tid").get<std::int64_t>(),
                                            e.at("ts").get<double>() * 1e-6};
        continue;
      }
      if (ph != "X") continue;
      const auto it = tracks.find(e.at("tid").get<std::int64_t>());
      if (it == tracks.end()) continue;
      Slice s;
      s.start = e.at("ts").get<double>() * 1e-6;
      s.end = s.start + e.at("dur").get<double>() * 1e-6;
      if (it->second.kind == "stage") {
        const nlohmann::json& a = e.at("args");
        s.op = parse_op(a.at("op").get<std::string>(), where);
        if (s.op == Op::STEP || s.op == Op::SYNC) {
          s.minibatch = a.at("round").get<std::int64_t>();
        } else {
          s.minibatch = a.at("minibatch").get<std::int64_t>();
          s.samples = a.at("end").get<std::int64_t>() - a.at("begin").get<std::int64_t>();
          s.chunk = static_cast<int>(a.value("chunk", std::int64_t{0}));
          if (s.chunk < 0 || s.chunk >= p.chunks) fail(where + ": chunk out of range");
        }
      }
      it->second.slices.push_back(s);
    } catch (const nlohmann::json::exception& e2) {
      fail(where + ": " + e2.what());
    }
  }

  double first = std::numeric_limits<double>::infinity();
  double last = -first;
  std::map<std::pair<int, Op>, std::vector<std::pair<std::int64_t, double>>> measured;
  std::vector<double> steps, syncs;
  std::vector<std::vector<double>> step_ends(static_cast<std::size_t>(R));
  double busy_total = 0;
  for (auto& [tid, t] : tracks) {
    (void)tid;
    std::sort(t.slices.begin(), t.slices.end(),
              [](const Slice& a, const Slice& b) { return a.start < b.start; });
    double busy = 0;
    for (const Slice& s : t.slices) busy += s.end - s.start;
    if (t.kind == "loader") {
      out.loads += static_cast<std::int64_t>(t.slices.size());
      out.loader_busy_s += busy;
      continue;
    }
    if (t.kind == "coordinator") {
      out.losses += static_cast<std::int64_t>(t.slices.size());
      out.coordinator_busy_s += busy;
      continue;
    }
    if (t.kind != "stage") continue;
    for (const Slice& s : t.slices) {
      first = std::min(first, s.start);
      last = std::max(last, s.end);
      const double d = s.end - s.start;
      if (s.op == Op::STEP) {
        steps.push_back(d);
        step_ends[static_cast<std::size_t>(t.device)].push_back(s.end);
      } else if (s.op == Op::SYNC) {
        syncs.push_back(d);
      } else {
        measured[{p.virtual_stage(t.stage, s.chunk), s.op}].push_back({s.samples, d});
      }
    }
    busy_total += busy;
    out.replicas.push_back({t.device, t.stage, t.replica, t.placement,
                            static_cast<std::int64_t>(t.slices.size()), busy, 0});
  }
  if (out.replicas.empty() || !(last > first)) fail("the trace holds no stage actions");
  std::sort(out.replicas.begin(), out.replicas.end(),
            [](const ReplicaUse& a, const ReplicaUse& b) { return a.device < b.device; });
  out.span_s = last - first;
  for (ReplicaUse& r : out.replicas) r.utilization = std::clamp(r.busy_s / out.span_s, 0.0, 1.0);
  out.bubble = std::clamp(1.0 - busy_total / (static_cast<double>(R) * out.span_s), 0.0, 1.0);
  const auto mean = [](const std::vector<double>& xs) {
    double s = 0;
    for (double x : xs) s += x;
    return xs.empty() ? 0.0 : s / static_cast<double>(xs.size());
  };
  out.step_action_s = mean(steps);
  out.sync_action_s = mean(syncs);

  // Message delay: flows between stage tracks whose consumer was idle when its producer ended.
  {
    const auto slice_at = [&](const FlowEnd& f) -> std::pair<const Track*, std::ptrdiff_t> {
      const auto it = tracks.find(f.tid);
      if (it == tracks.end() || it->second.kind != "stage") return {nullptr, -1};
      const auto& v = it->second.slices;
      auto s = std::upper_bound(v.begin(), v.end(), f.ts,
                                [](double ts, const Slice& x) { return ts < x.start; });
      if (s == v.begin()) return {nullptr, -1};
      --s;
      if (f.ts > s->end) return {nullptr, -1};
      return {&it->second, s - v.begin()};
    };
    std::vector<double> gaps;
    for (const auto& [id, f] : flows) {
      (void)id;
      const auto [pt, pi] = slice_at(f.first);
      const auto [ct, ci] = slice_at(f.second);
      if (pt == nullptr || ct == nullptr || pt == ct) continue;
      const Slice& prod = pt->slices[static_cast<std::size_t>(pi)];
      const Slice& cons = ct->slices[static_cast<std::size_t>(ci)];
      const double idle_since = ci > 0 ? ct->slices[static_cast<std::size_t>(ci - 1)].end : first;
      if (idle_since <= prod.end && cons.start >= prod.end) gaps.push_back(cons.start - prod.end);
    }
    if (!gaps.empty()) {
      std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2),
                       gaps.end());
      out.message_delay_s = gaps[gaps.size() / 2];
    }
  }

  // The simulator, fed what the trace measured.
  schedules::SimulationCosts costs;
  costs.stages.resize(static_cast<std::size_t>(V));
  for (int vs = 0; vs < V; ++vs) {
    const Fit f = Fit::of(measured[{vs, Op::F}]);
    const Fit b = Fit::of(measured[{vs, Op::B}]);
    const Fit w = Fit::of(measured[{vs, Op::W}]);
    out.durations.push_back({vs, f.mean, b.mean, w.mean, f.count, b.count, w.count});
    schedules::StageCosts& c = costs.stages[static_cast<std::size_t>(vs)];
    c.forward = schedules::Cost::function([f](std::int64_t n) { return f(n); });
    // A re-materializing B recomputes its forward, which the simulator adds on its own.
    const bool remat = p.rematerialize;
    c.backward = schedules::Cost::function(
        [f, b, remat](std::int64_t n) { return std::max(0.0, b(n) - (remat ? f(n) : 0.0)); });
    c.weight = schedules::Cost::function([w](std::int64_t n) { return w(n); });
  }
  costs.step = out.step_action_s;
  costs.sync = out.sync_action_s;
  costs.latency = out.message_delay_s;
  const auto step_ends_of = [&](const schedules::SimulationResult& r) {
    std::vector<std::vector<double>> ends(static_cast<std::size_t>(R));
    for (const schedules::OpInterval& op : r.timeline) {
      if (list->devices[static_cast<std::size_t>(op.device)][op.index].op == Op::STEP) {
        ends[static_cast<std::size_t>(op.device)].push_back(op.end);
      }
    }
    return ends;
  };
  const schedules::SimulationResult sim = schedules::simulate(*list, costs, true);
  const auto sim_step_ends = step_ends_of(sim);
  costs.latency = 0;
  const schedules::SimulationResult ideal = schedules::simulate(*list, costs, true);
  const auto ideal_step = steady_step(step_ends_of(ideal));
  const auto minibatches = static_cast<double>(p.minibatches);
  out.schedule = p;
  out.per_minibatch_s = out.span_s / minibatches;
  out.predicted_makespan_s = sim.makespan;
  out.predicted_per_minibatch_s = sim.makespan / minibatches;
  out.predicted_bubble = sim.bubble;
  for (const double busy : sim.busy) {
    out.predicted_utilization.push_back(sim.makespan > 0 ? busy / sim.makespan : 0.0);
  }
  const auto real_step = steady_step(step_ends);
  const auto sim_step = steady_step(sim_step_ends);
  out.steady = real_step && sim_step;
  out.step_s = out.steady ? *real_step : out.per_minibatch_s;
  out.predicted_step_s = out.steady ? *sim_step : out.predicted_per_minibatch_s;
  out.ideal_step_s = out.steady && ideal_step ? *ideal_step : ideal.makespan / minibatches;
  out.ratio = out.predicted_step_s > 0 ? out.step_s / out.predicted_step_s
                                       : std::numeric_limits<double>::infinity();
  return out;
}

TraceSummary summarize_trace_file(const std::filesystem::path& path) {
  return summarize_trace(train::read_trace_file(path), path.string());
}

std::string format_trace_summary(const TraceSummary& s) {
  const auto& p = s.schedule;
  std::string replicas;
  for (int st = 0; st < p.stages; ++st) {
    if (st > 0) replicas += '-';
    replicas += std::to_string(p.replicas_of(st));
  }
  std::string out = fmt::format(
      "trace {}: schedule {}, {} stages (replicas {}){}, {} slice{} of minibatch {}, {} "
      "minibatches\n",
      s.source, schedules::to_string(p.kind), p.stages, replicas,
      p.chunks > 1 ? fmt::format(", {} chunks", p.chunks) : "", p.slices, p.slices == 1 ? "" : "s",
      p.samples(), p.minibatches);
  if (s.processes > 1) {
    out += fmt::format("a job of {} processes, their traces merged on one clock ({})\n",
                       s.processes, s.clock);
  }
  out += fmt::format(
      "span {:.3f} s from the first action to the last; loader {} loads ({} ms busy), "
      "coordinator {} loss reports ({} ms busy)\n\n",
      s.span_s, s.loads, ms(s.loader_busy_s), s.losses, ms(s.coordinator_busy_s));
  out += fmt::format("{:<30} {:>8} {:>9} {:>12}\n", "replica", "actions", "busy s", "utilization");
  for (const ReplicaUse& r : s.replicas) {
    const std::string name = fmt::format("stage {} replica {} (d{}{}{})", r.stage, r.replica,
                                         r.device, r.placement.empty() ? "" : ", ", r.placement);
    out += fmt::format("{:<30} {:>8} {:>9.3f} {:>11.1f}%\n", name, r.actions, r.busy_s,
                       100 * r.utilization);
  }
  out += fmt::format("bubble fraction {:.1f}% (simulated {:.1f}%)\n\n", 100 * s.bubble,
                     100 * s.predicted_bubble);
  out += "mean action durations (ms), fed to the simulator:\n";
  out += fmt::format("{:>6} {:>9} {:>9} {:>9}\n", "vstage", "F", "B", "W");
  const auto cell = [](double v, std::int64_t n) { return n > 0 ? ms(v) : std::string("-"); };
  for (const VstageDurations& d : s.durations) {
    out += fmt::format("{:>6} {:>9} {:>9} {:>9}\n", d.vstage, cell(d.forward, d.forwards),
                       cell(d.backward, d.backwards), cell(d.weight, d.weights));
  }
  out += fmt::format(
      "STEP {} ms, SYNC {} ms, message delay {} ms (median gap from a sender's end to its idle "
      "receiver's start)\n\n",
      ms(s.step_action_s), ms(s.sync_action_s), ms(s.message_delay_s));
  out += fmt::format("step time ({}):\n",
                     s.steady ? "per update round, steady state" : "span / minibatches");
  out += fmt::format("  measured              {:>10} ms\n", ms(s.step_s));
  out += fmt::format("  simulated             {:>10} ms  (measured durations and delay)\n",
                     ms(s.predicted_step_s));
  out += fmt::format("  ratio                 {:>10.3f}  (measured / simulated)\n", s.ratio);
  out += fmt::format("  simulated, no delay   {:>10} ms  (a core per replica, instant messages)\n",
                     ms(s.ideal_step_s));
  out +=
      fmt::format("span / minibatches: measured {} ms, simulated {} ms (makespan {:.3f} s)\n",
                  ms(s.per_minibatch_s), ms(s.predicted_per_minibatch_s), s.predicted_makespan_s);
  return out;
}

}  // namespace tandem::apps
