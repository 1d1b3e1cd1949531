#include "train/pipeline_trace.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "actors/stage_edges.hpp"
#include "runtime/trace_recorder.hpp"
#include "schedules/routing.hpp"
#include "schedules/schedule_kind.hpp"
#include "schedules/text_form.hpp"
#include "train/schedule_json.hpp"

namespace tandem::train {
namespace {

using Clock = std::chrono::steady_clock;
using schedules::Op;

// Track numbers: the loader first, then the stage replicas by device, then the coordinator,
// which is also the order viewers show them in.
constexpr std::uint32_t kLoaderTrack = 1;
std::uint32_t stage_track(int device) {
  return static_cast<std::uint32_t>(device) + 2;
}

// This boot's identity: processes that share it share steady_clock (CLOCK_MONOTONIC counts
// from the boot), so their traces align on it exactly. Empty when unreadable or malformed.
std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!in || !std::getline(in, id) || id.empty() || id.size() > 64) return {};
  const bool plain = std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-';
  });
  return plain ? id : std::string();
}

// Where the trace's zero lies on the clocks a merge can align several processes' traces by:
// steady_clock (exact between processes of one boot) and system_clock (shared across hosts as
// far as their clocks are synchronized).
nlohmann::json clock_of(Clock::time_point origin) {
  const Clock::time_point steady_now = Clock::now();
  const auto system_now = std::chrono::system_clock::now();
  const auto since = [](auto d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  };
  return {{"steady_ns", since(origin.time_since_epoch())},
          {"system_ns", since(system_now.time_since_epoch()) - since(steady_now - origin)},
          {"boot_id", boot_id()}};
}

}  // namespace

const char* trace_port_name(schedules::Port port) {
  return schedules::to_string(port);
}

namespace {

// What becomes one trace event, sorted by time before it is recorded.
struct Pending {
  char phase;  // 'X' slice, 's' flow start, 'f' flow end
  std::uint32_t track;
  std::int64_t ts;
  std::int64_t dur;
  std::uint64_t id;
  std::string name;
  std::string category;
  TraceArgs args;
};

// An F/B/W: virtual stage, op, minibatch, samples.
using Key = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t>;

[[noreturn]] void bad_field(const std::string& field, const std::string& what) {
  throw std::runtime_error("tandem.schedule." + field + ": " + what);
}

// The value as a T, refused when it does not fit one (2^31 read as an int would wrap to a
// negative count and be reported as such).
template <class T>
T field(const nlohmann::json& j, const std::string& name, T fallback) {
  if (!j.contains(name)) return fallback;
  const nlohmann::json& v = j.at(name);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const bool fits =
        v.is_number_integer() &&
        (v.is_number_unsigned()
             ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())
             : v.get<std::int64_t>() >= std::numeric_limits<T>::min() &&
                   v.get<std::int64_t>() <= std::numeric_limits<T>::max());
    if (!fits) bad_field(name, "unexpected value " + v.dump() + " (not an integer that fits)");
  }
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception&) {
    bad_field(name, "unexpected value " + v.dump());
  }
}

}  // namespace

std::string trace_action_name(const schedules::ScheduleParams& params,
                              const schedules::Action& action) {
  std::string name = schedules::format_action(params, action);
  if (action.op == Op::STEP || action.op == Op::SYNC) name += std::to_string(action.minibatch);
  return name;
}

schedules::ScheduleParams schedule_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::runtime_error("tandem.schedule: expected an object");
  schedules::ScheduleParams p;
  const auto kind = field<std::string>(j, "kind", "");
  if (kind.empty()) bad_field("kind", "missing");
  try {
    p.kind = schedules::parse_schedule_kind(kind);
  } catch (const std::exception& e) {
    bad_field("kind", e.what());
  }
  p.stages = field<int>(j, "stages", p.stages);
  p.slices = field<int>(j, "slices", p.slices);
  p.minibatch_size = field<std::int64_t>(j, "minibatch_size", p.minibatch_size);
  p.replicas = field<std::vector<int>>(j, "replicas", {});
  p.chunks = field<int>(j, "chunks", p.chunks);
  p.rematerialize = field<bool>(j, "rematerialize", false);
  p.minibatches = field<std::int64_t>(j, "minibatches", p.minibatches);
  p.forward_slices = field<std::vector<std::vector<std::int64_t>>>(j, "forward_slices", {});
  p.backward_slices = field<std::vector<std::vector<std::int64_t>>>(j, "backward_slices", {});
  return p;
}

void PipelineTrace::attach(actors::PipelineSpec& spec) {
  {
    std::lock_guard lock(mu_);
    plan_ = spec.plan;
    order_ = spec.order;
    // A graph's arrows follow its tensor edges, as its messages did.
    edges_ = actors::tensor_edges(
        *spec.model,
        schedules::virtual_stage_layers(spec.plan, spec.model->num_layers(), spec.chunk_layers),
        spec.relay_skips);
  }
  spec.observer = [this, previous = std::move(spec.observer)](const actors::StageEvent& e) {
    if (previous) previous(e);
    std::lock_guard lock(mu_);
    actions_.push_back(
        {e.device, e.action, e.version, e.start, e.end, e.device_started, e.device_done});
  };
  spec.on_event = [this, previous = std::move(spec.on_event)](const actors::PipelineEvent& e) {
    if (previous) previous(e);
    std::lock_guard lock(mu_);
    events_.push_back(e);
  };
}

std::size_t PipelineTrace::actions() const {
  std::lock_guard lock(mu_);
  return actions_.size();
}

nlohmann::json PipelineTrace::to_json() const {
  std::lock_guard lock(mu_);
  if (!plan_) throw std::logic_error("PipelineTrace::to_json before attach");
  schedules::ScheduleParams params = order_ ? order_->params : plan_->schedule;
  const schedules::Routing routing =
      order_ ? schedules::Routing(*order_, edges_) : schedules::Routing(params, edges_);
  const int R = params.total_replicas();
  const int V = params.stages * params.chunks;
  const std::uint32_t coordinator_track = stage_track(R);

  // An asynchronous device's action is drawn where the device ran it, not where the actor
  // submitted it (its timed events place it on the host's clock once the run is over).
  std::vector<Action> spans = actions_;
  for (Action& a : spans) {
    const std::optional<Clock::time_point> at = a.device_started.completed_at();
    const std::optional<std::chrono::nanoseconds> took =
        a.device_done.elapsed_since(a.device_started);
    if (at && took) {
      a.start = *at;
      a.end = *at + std::chrono::duration_cast<Clock::duration>(*took);
    }
  }
  Clock::time_point origin = Clock::time_point::max();
  for (const Action& a : spans) origin = std::min(origin, a.start);
  for (const actors::PipelineEvent& e : events_) origin = std::min(origin, e.start);
  if (origin == Clock::time_point::max()) origin = Clock::now();
  const auto ns = [origin](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin).count();
  };

  std::vector<Pending> out;
  std::map<Key, std::size_t> producers;  // F/B/W -> index in spans
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const Action& a = spans[i];
    const schedules::Action& x = a.action;
    TraceArgs args{{"op", std::string(schedules::to_string(x.op))}};
    if (x.op == Op::STEP || x.op == Op::SYNC) {
      args.push_back({"round", x.minibatch});
    } else {
      const int vs = params.virtual_stage(params.stage_of(a.device), x.chunk);
      producers[{vs, static_cast<int>(x.op), x.minibatch, x.slice.begin, x.slice.end}] = i;
      args.push_back({"minibatch", x.minibatch});
      args.push_back({"begin", x.slice.begin});
      args.push_back({"end", x.slice.end});
      args.push_back({"chunk", std::int64_t{x.chunk}});
    }
    args.push_back({"version", a.version});
    out.push_back({'X', stage_track(a.device), ns(a.start), ns(a.end) - ns(a.start), 0,
                   trace_action_name(params, x), "action", std::move(args)});
  }
  std::map<std::int64_t, std::size_t> loads;  // minibatch -> index in events_
  std::set<std::int64_t> loaded;
  for (std::size_t i = 0; i < events_.size(); ++i) {
    const actors::PipelineEvent& e = events_[i];
    const std::int64_t dur = ns(e.finish) - ns(e.start);
    if (e.kind == actors::PipelineEvent::Kind::loader_send) {
      loads[e.minibatch] = i;
      loaded.insert(e.minibatch);
      out.push_back({'X', kLoaderTrack, ns(e.start), dur, 0,
                     "load mb" + std::to_string(e.minibatch), "loader",
                     TraceArgs{{"minibatch", e.minibatch}}});
    } else {
      out.push_back({'X', coordinator_track, ns(e.start), dur, 0,
                     "loss mb" + std::to_string(e.minibatch) + "[" + std::to_string(e.begin) + ":" +
                         std::to_string(e.end) + ")",
                     "coordinator",
                     TraceArgs{{"minibatch", e.minibatch},
                               {"begin", e.begin},
                               {"end", e.end},
                               {"complete", std::int64_t{e.complete ? 1 : 0}}}});
    }
  }

  // An arrow leaves its producer just before the producer's end and enters its consumer just
  // after the consumer's start, so that each end lies inside the slice it binds to.
  std::uint64_t next_id = 0;
  const auto flow = [&](std::uint32_t from, Clock::time_point from_start,
                        Clock::time_point from_end, std::uint32_t to, Clock::time_point to_start,
                        Clock::time_point to_end, const std::string& name) {
    const std::int64_t from_eps = std::min<std::int64_t>(1000, (ns(from_end) - ns(from_start)) / 2);
    const std::int64_t to_eps = std::min<std::int64_t>(1000, (ns(to_end) - ns(to_start)) / 2);
    const std::uint64_t id = ++next_id;
    out.push_back({'s', from, ns(from_end) - from_eps, 0, id, name, "flow", {}});
    out.push_back({'f', to, ns(to_start) + to_eps, 0, id, name, "flow", {}});
  };
  std::vector<schedules::Route> inputs;
  for (const Action& a : spans) {
    if (a.action.op != Op::F && a.action.op != Op::B) continue;
    routing.inputs(a.device, a.action, inputs);
    for (const schedules::Route& r : inputs) {
      if (r.device == schedules::kLoader) {
        const auto it = loads.find(r.minibatch);
        if (it == loads.end()) continue;
        const actors::PipelineEvent& l = events_[it->second];
        flow(kLoaderTrack, l.start, l.finish, stage_track(a.device), a.start, a.end,
             trace_port_name(r.port));
        continue;
      }
      const int vs = params.virtual_stage(params.stage_of(r.device), r.chunk);
      const auto it =
          producers.find({vs, static_cast<int>(r.op), r.minibatch, r.slice.begin, r.slice.end});
      if (it == producers.end()) continue;  // a run that stopped before its producer ran
      const Action& p = spans[it->second];
      flow(stage_track(p.device), p.start, p.end, stage_track(a.device), a.start, a.end,
           trace_port_name(r.port));
    }
  }
  for (const actors::PipelineEvent& e : events_) {
    if (e.kind != actors::PipelineEvent::Kind::coordinator_loss) continue;
    const auto it = producers.find({V - 1, static_cast<int>(Op::F), e.minibatch, e.begin, e.end});
    if (it == producers.end()) continue;
    const Action& p = spans[it->second];
    flow(stage_track(p.device), p.start, p.end, coordinator_track, e.start, e.finish, "loss");
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Pending& a, const Pending& b) { return a.ts < b.ts; });

  TraceRecorder rec;
  rec.set_process_name("tandem pipeline: " + std::string(schedules::to_string(params.kind)));
  nlohmann::json tracks = nlohmann::json::array();
  rec.set_track_name(kLoaderTrack, "loader");
  rec.set_track_sort_index(kLoaderTrack, 0);
  tracks.push_back({{"tid", kLoaderTrack}, {"kind", "loader"}});
  for (int d = 0; d < R; ++d) {
    const int s = params.stage_of(d);
    const int r = params.replica_of(d);
    std::string placement;
    if (s < static_cast<int>(plan_->stages.size()) &&
        r < static_cast<int>(plan_->stages[s].replicas.size())) {
      placement = plan_->stages[s].replicas[r].device;
    }
    rec.set_track_name(stage_track(d), "stage " + std::to_string(s) + " replica " +
                                           std::to_string(r) + " (device " + std::to_string(d) +
                                           (placement.empty() ? "" : ", " + placement) + ")");
    rec.set_track_sort_index(stage_track(d), d + 1);
    tracks.push_back({{"tid", stage_track(d)},
                      {"kind", "stage"},
                      {"device", d},
                      {"stage", s},
                      {"replica", r},
                      {"placement", placement}});
  }
  rec.set_track_name(coordinator_track, "coordinator");
  rec.set_track_sort_index(coordinator_track, R + 1);
  tracks.push_back({{"tid", coordinator_track}, {"kind", "coordinator"}});
  for (Pending& e : out) {
    switch (e.phase) {
      case 'X':
        rec.complete(e.name, e.category, e.track, e.ts, e.dur, std::move(e.args));
        break;
      case 's':
        rec.flow_start(e.id, e.track, e.name, e.ts);
        break;
      default:
        rec.flow_end(e.id, e.track, e.name, e.ts);
        break;
    }
  }

  // A run stopped early covers fewer minibatches than its plan.
  if (!order_ && !loaded.empty() && static_cast<std::int64_t>(loaded.size()) < params.minibatches) {
    params.minibatches = static_cast<std::int64_t>(loaded.size());
  }
  nlohmann::json stages = nlohmann::json::array();
  for (const schedules::StagePlan& st : plan_->stages) {
    nlohmann::json devices = nlohmann::json::array();
    for (const schedules::Placement& pl : st.replicas) devices.push_back(pl.device);
    stages.push_back({{"layers", {st.layers.begin, st.layers.end}}, {"devices", devices}});
  }
  nlohmann::json meta = {{"format", "tandem pipeline trace"},    {"version", 1},
                         {"schedule", schedule_to_json(params)}, {"stages", std::move(stages)},
                         {"tracks", std::move(tracks)},          {"clock", clock_of(origin)}};
  if (order_) meta["order"] = schedules::format_actions(*order_);
  nlohmann::json j = rec.to_json();
  j["tandem"] = std::move(meta);
  return j;
}

void PipelineTrace::write(const std::filesystem::path& path) const {
  const nlohmann::json j = to_json();
  std::ofstream out(path);
  if (!out) throw std::runtime_error("trace: cannot open '" + path.string() + "' for writing");
  out << j.dump() << '\n';
  out.flush();
  if (!out) throw std::runtime_error("trace: failed writing '" + path.string() + "'");
}

}  // namespace tandem::train
