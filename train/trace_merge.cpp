#include "train/trace_merge.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "schedules/routing.hpp"
#include "schedules/schedule_kind.hpp"
#include "schedules/text_form.hpp"
#include "train/pipeline_trace.hpp"

namespace tandem::train {
namespace {

using nlohmann::json;
using schedules::Op;

constexpr std::int64_t kMaxRanks = 1 << 16;
constexpr std::int64_t kMaxTrack = 1 << 20;
// Clock readings up to 2^62 ns (146 years) keep every difference of two within int64.
constexpr std::int64_t kMaxClockNs = std::int64_t{1} << 62;
// The ranks of one job start their first pipeline within seconds of each other; zeros further
// apart than this are not of one run.
constexpr std::int64_t kMaxSkewNs = std::int64_t{86400} * 1'000'000'000;

std::string excerpt(const json& j) {
  std::string s = j.dump(-1, ' ', true);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Reads the fields of one input, each checked for its type and range; errors name the input
// and the field.
struct Reader {
  const std::string& name;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw std::runtime_error(name + ": " + field + ": " + what);
  }
  const json& at(const json& parent, const std::string& key, const std::string& field) const {
    if (!parent.is_object() || !parent.contains(key)) fail(field, "missing");
    return parent[key];
  }
  const json& object(const json& parent, const std::string& key, const std::string& field) const {
    const json& j = at(parent, key, field);
    if (!j.is_object()) fail(field, "expected an object, got " + excerpt(j));
    return j;
  }
  std::int64_t integer(const json& parent, const std::string& key, const std::string& field,
                       std::int64_t min, std::int64_t max) const {
    const json& j = at(parent, key, field);
    const bool fits = j.is_number_integer() &&
                      (!j.is_number_unsigned() ||
                       j.get<std::uint64_t>() <=
                           static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
    if (!fits) fail(field, "expected an integer, got " + excerpt(j));
    const auto v = j.get<std::int64_t>();
    if (v < min || v > max) {
      fail(field, std::to_string(v) + " is outside [" + std::to_string(min) + ", " +
                      std::to_string(max) + "]");
    }
    return v;
  }
  // A time or duration in microseconds: finite, not negative.
  double micros(const json& parent, const std::string& key, const std::string& field) const {
    const json& j = at(parent, key, field);
    if (!j.is_number()) fail(field, "expected a number, got " + excerpt(j));
    const auto v = j.get<double>();
    if (!std::isfinite(v) || v < 0) fail(field, excerpt(j) + " is not a time");
    return v;
  }
  std::string text(const json& parent, const std::string& key, const std::string& field,
                   std::size_t max) const {
    const json& j = at(parent, key, field);
    if (!j.is_string()) fail(field, "expected a string, got " + excerpt(j));
    const auto& s = j.get_ref<const std::string&>();
    if (s.size() > max) fail(field, "longer than " + std::to_string(max) + " characters");
    return s;
  }
};

struct Rank {
  const TraceInput* input = nullptr;
  TraceProcess process;
  json clock;
  std::int64_t steady_ns = 0, system_ns = 0;
  std::string boot_id;
  std::int64_t minibatches = 0;
  std::int64_t shift_ns = 0;  // added to its times to put them on the merged clock

  Reader reader() const { return {input->name}; }
};

Rank read_rank(const TraceInput& in) {
  Rank rank;
  rank.input = &in;
  const Reader r = rank.reader();
  const json& t = in.trace;
  if (!t.is_object()) r.fail("(top)", "expected a JSON object");
  if (!r.at(t, "traceEvents", "traceEvents").is_array()) {
    r.fail("traceEvents", "expected an array");
  }
  const json& meta = r.object(t, "tandem", "tandem");
  if (r.text(meta, "format", "tandem.format", 64) != "tandem pipeline trace") {
    r.fail("tandem.format", "not a tandem pipeline trace");
  }
  (void)r.integer(meta, "version", "tandem.version", 1, 1);
  if (!meta.contains("process")) {
    r.fail("tandem.process",
           "missing: not the trace of one rank of a multi-process job (a single process's "
           "trace, or a merged one)");
  }
  const json& p = r.object(meta, "process", "tandem.process");
  rank.process.world_size =
      static_cast<int>(r.integer(p, "world_size", "tandem.process.world_size", 2, kMaxRanks));
  rank.process.rank =
      static_cast<int>(r.integer(p, "rank", "tandem.process.rank", 0, rank.process.world_size - 1));
  rank.process.job = r.text(p, "job", "tandem.process.job", 128);
  rank.process.host = r.text(p, "host", "tandem.process.host", 256);
  rank.clock = r.object(meta, "clock", "tandem.clock");
  rank.steady_ns = r.integer(rank.clock, "steady_ns", "tandem.clock.steady_ns", 0, kMaxClockNs);
  rank.system_ns = r.integer(rank.clock, "system_ns", "tandem.clock.system_ns", 0, kMaxClockNs);
  rank.boot_id = r.text(rank.clock, "boot_id", "tandem.clock.boot_id", 64);
  const json& schedule = r.object(meta, "schedule", "tandem.schedule");
  rank.minibatches = r.integer(schedule, "minibatches", "tandem.schedule.minibatches", 0,
                               std::numeric_limits<std::int64_t>::max());
  return rank;
}

// The plan's parts of "tandem", which every rank of one job writes alike (a rank whose loader
// stopped early writes fewer minibatches, so they are left out).
json plan_part(const json& meta, const std::string& key) {
  if (!meta.contains(key)) return nullptr;
  json j = meta[key];
  if (key == "schedule") j.erase("minibatches");
  return j;
}

// Every input a rank of one job, each rank once and every rank there.
void check_one_job(const std::vector<Rank>& ranks) {
  const Rank& first = ranks.front();
  std::map<int, const Rank*> seen;
  for (const Rank& r : ranks) {
    const Reader rd = r.reader();
    const std::string& other = first.input->name;
    if (r.process.job != first.process.job) {
      rd.fail("tandem.process.job", "'" + r.process.job + "' is not " + other + "'s job '" +
                                        first.process.job + "': traces of different jobs");
    }
    if (r.process.world_size != first.process.world_size) {
      rd.fail("tandem.process.world_size",
              std::to_string(r.process.world_size) + " processes, " + other + " says " +
                  std::to_string(first.process.world_size) + ": traces of different jobs");
    }
    for (const std::string key : {"schedule", "stages", "tracks", "order"}) {
      const json& meta = r.input->trace["tandem"];
      if (plan_part(meta, key) != plan_part(first.input->trace["tandem"], key)) {
        rd.fail("tandem." + key, "differs from " + other + "'s: traces of different plans");
      }
    }
    const auto [it, fresh] = seen.emplace(r.process.rank, &r);
    if (!fresh) {
      rd.fail("tandem.process.rank", "rank " + std::to_string(r.process.rank) +
                                         " is given twice (also " + it->second->input->name + ")");
    }
  }
  for (int k = 0; k < first.process.world_size; ++k) {
    if (seen.count(k) == 0) {
      throw std::runtime_error("trace merge: no trace of rank " + std::to_string(k) +
                               " of the job's " + std::to_string(first.process.world_size) +
                               " (every rank's trace is needed)");
    }
  }
}

// Puts every rank on the clock of the one whose zero came first; returns the clock's name.
std::string align(std::vector<Rank>& ranks) {
  const bool one_boot = std::all_of(ranks.begin(), ranks.end(), [&](const Rank& r) {
    return !r.boot_id.empty() && r.boot_id == ranks.front().boot_id;
  });
  const auto base = [one_boot](const Rank& r) { return one_boot ? r.steady_ns : r.system_ns; };
  std::int64_t zero = base(ranks.front());
  for (const Rank& r : ranks) zero = std::min(zero, base(r));
  for (Rank& r : ranks) {
    r.shift_ns = base(r) - zero;
    if (r.shift_ns > kMaxSkewNs) {
      r.reader().fail("tandem.clock", "its zero lies " +
                                          std::to_string(r.shift_ns / 1'000'000'000) +
                                          " s after another rank's: not one run");
    }
  }
  return one_boot ? "steady_clock" : "system_clock";
}

struct Track {
  std::string kind;  // stage, loader, coordinator
  int device = -1;
  int owner = -1;  // the index in ranks of the one whose trace has its slices
};

// The plan's layout: its tracks and the routing that says which action feeds which.
struct Layout {
  schedules::ScheduleParams params;
  std::optional<schedules::Routing> routing;
  std::map<std::int64_t, Track> tracks;
};

Layout read_layout(const Rank& first) {
  const Reader r = first.reader();
  const json& meta = first.input->trace["tandem"];
  Layout out;
  try {
    out.params = schedule_from_json(meta["schedule"]);
    if (meta.contains("order")) {
      const schedules::ActionList list =
          schedules::parse_actions(r.text(meta, "order", "tandem.order", std::string::npos));
      out.params = list.params;
      out.routing.emplace(list);
    } else {
      out.routing.emplace(out.params);
    }
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.rfind(first.input->name + ": ", 0) == 0) throw;
    r.fail("tandem.schedule", what);
  }
  const int devices = out.params.total_replicas();
  const json& tracks = r.at(meta, "tracks", "tandem.tracks");
  if (!tracks.is_array()) r.fail("tandem.tracks", "expected an array");
  for (std::size_t i = 0; i < tracks.size(); ++i) {
    const std::string field = "tandem.tracks[" + std::to_string(i) + "]";
    Track t;
    t.kind = r.text(tracks[i], "kind", field + ".kind", 16);
    if (t.kind == "stage") {
      t.device =
          static_cast<int>(r.integer(tracks[i], "device", field + ".device", 0, devices - 1));
    } else if (t.kind != "loader" && t.kind != "coordinator") {
      r.fail(field + ".kind", "unknown kind '" + t.kind + "'");
    }
    if (!out.tracks.emplace(r.integer(tracks[i], "tid", field + ".tid", 0, kMaxTrack), t).second) {
      r.fail(field + ".tid", "a track numbered twice");
    }
  }
  return out;
}

// A slice, on the merged clock (microseconds), of the rank (index in ranks) that ran it.
struct Span {
  std::size_t rank = 0;
  std::int64_t tid = 0;
  double start = 0, end = 0;
};

// An F/B/W: virtual stage, op, minibatch, samples.
using Key = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t>;

class Merger {
 public:
  Merger(std::vector<Rank>& ranks, Layout& layout) : ranks_(ranks), layout_(layout) {}

  void add(std::size_t k);
  void add_flows_between_ranks();
  json result(const std::string& clock);

 private:
  struct Consumer {
    int device;
    schedules::Action action;
    Span span;
  };

  void add_metadata(std::size_t k, const json& e, const std::string& field);
  void add_slice(std::size_t k, std::int64_t tid, const json& e, Span span,
                 const std::string& field);
  void flow(const Span& from, const Span& to, const std::string& name);
  json metadata(const json& tracks) const;
  json meta(json tracks, const std::string& clock) const;
  int pid(std::size_t k) const { return ranks_[k].process.rank + 1; }

  std::vector<Rank>& ranks_;
  Layout& layout_;
  std::vector<json> events_;
  std::map<std::pair<std::size_t, std::int64_t>, std::vector<json>> names_;  // (rank, tid)
  std::map<std::pair<std::size_t, std::int64_t>, std::uint64_t> flow_ids_;
  std::uint64_t next_flow_ = 0;
  std::map<Key, Span> producers_;
  std::map<std::int64_t, Span> loads_;
  std::vector<Consumer> consumers_;
  std::vector<std::pair<Key, Span>> losses_;  // the F whose loss it is, the report
};

void Merger::add(std::size_t k) {
  const Reader r = ranks_[k].reader();
  const json& events = ranks_[k].input->trace["traceEvents"];
  const double shift_us = static_cast<double>(ranks_[k].shift_ns) / 1000.0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    const std::string field = "traceEvents[" + std::to_string(i) + "]";
    if (!e.is_object()) r.fail(field, "expected an object");
    const std::string ph = r.text(e, "ph", field + ".ph", 1);
    if (ph == "M") {
      add_metadata(k, e, field);
      continue;
    }
    const std::int64_t tid = r.integer(e, "tid", field + ".tid", 0, kMaxTrack);
    if (layout_.tracks.count(tid) == 0) {
      r.fail(field + ".tid", "track " + std::to_string(tid) + " is not in tandem.tracks");
    }
    json copy = e;
    copy["pid"] = pid(k);
    copy["ts"] = r.micros(e, "ts", field + ".ts") + shift_us;
    if (ph == "X") {
      const double start = copy["ts"].get<double>();
      add_slice(k, tid, e, {k, tid, start, start + r.micros(e, "dur", field + ".dur")}, field);
    } else if (ph == "s" || ph == "f") {
      const auto id = static_cast<std::uint64_t>(
          r.integer(e, "id", field + ".id", 0, std::numeric_limits<std::int64_t>::max()));
      const auto [it, fresh] = flow_ids_.emplace(std::pair{k, id}, next_flow_ + 1);
      if (fresh) ++next_flow_;
      copy["id"] = it->second;
    } else {
      r.fail(field + ".ph", "'" + ph + "' is not an event a pipeline trace holds");
    }
    events_.push_back(std::move(copy));
  }
}

void Merger::add_metadata(std::size_t k, const json& e, const std::string& field) {
  const Reader r = ranks_[k].reader();
  const std::string name = r.text(e, "name", field + ".name", 64);
  if (name != "thread_name" && name != "thread_sort_index") return;  // the rest is made anew
  const std::int64_t tid = r.integer(e, "tid", field + ".tid", 0, kMaxTrack);
  names_[{k, tid}].push_back(e);
}

void Merger::add_slice(std::size_t k, std::int64_t tid, const json& e, Span span,
                       const std::string& field) {
  const Reader r = ranks_[k].reader();
  Track& track = layout_.tracks.at(tid);
  if (track.owner >= 0 && static_cast<std::size_t>(track.owner) != k) {
    r.fail(field + ".tid", "track " + std::to_string(tid) + " (" + track.kind + ") has slices in " +
                               ranks_[static_cast<std::size_t>(track.owner)].input->name +
                               " too: one track runs in one rank");
  }
  track.owner = static_cast<int>(k);
  const json& args = r.object(e, "args", field + ".args");
  const auto arg = [&](const char* key) {
    return r.integer(args, key, field + ".args." + key, 0,
                     std::numeric_limits<std::int64_t>::max());
  };
  const schedules::ScheduleParams& p = layout_.params;
  if (track.kind == "loader") {
    loads_[arg("minibatch")] = span;
  } else if (track.kind == "coordinator") {
    losses_.push_back({{p.stages * p.chunks - 1, static_cast<int>(Op::F), arg("minibatch"),
                        arg("begin"), arg("end")},
                       span});
  } else {
    const std::string op = r.text(args, "op", field + ".args.op", 8);
    schedules::Action a;
    if (op == "STEP" || op == "SYNC") return;
    if (op == "F" || op == "B" || op == "W") {
      a.op = op == "F" ? Op::F : op == "B" ? Op::B : Op::W;
    } else {
      r.fail(field + ".args.op", "unknown op '" + op + "'");
    }
    a.minibatch = arg("minibatch");
    a.slice = {arg("begin"), arg("end")};
    a.chunk = static_cast<int>(r.integer(args, "chunk", field + ".args.chunk", 0, p.chunks - 1));
    a.replica = p.replica_of(track.device);
    const int vs = p.virtual_stage(p.stage_of(track.device), a.chunk);
    producers_[{vs, static_cast<int>(a.op), a.minibatch, a.slice.begin, a.slice.end}] = span;
    if (a.op != Op::W) consumers_.push_back({track.device, a, span});
  }
}

// As PipelineTrace draws one: leaving just before the producer's end, entering just after the
// consumer's start, so that each end lies inside the slice it binds to.
void Merger::flow(const Span& from, const Span& to, const std::string& name) {
  const double from_eps = std::min(1.0, (from.end - from.start) / 2);
  const double to_eps = std::min(1.0, (to.end - to.start) / 2);
  const std::uint64_t id = ++next_flow_;
  events_.push_back({{"ph", "s"},
                     {"ts", from.end - from_eps},
                     {"pid", pid(from.rank)},
                     {"tid", from.tid},
                     {"name", name},
                     {"cat", "flow"},
                     {"id", id}});
  events_.push_back({{"ph", "f"},
                     {"ts", to.start + to_eps},
                     {"pid", pid(to.rank)},
                     {"tid", to.tid},
                     {"name", name},
                     {"cat", "flow"},
                     {"id", id},
                     {"bp", "e"}});
}

// The arrows no rank could draw: each of its own traces has only the tensors both of whose ends
// ran in it.
void Merger::add_flows_between_ranks() {
  const schedules::ScheduleParams& p = layout_.params;
  std::vector<schedules::Route> inputs;
  for (const Consumer& c : consumers_) {
    try {
      layout_.routing->inputs(c.device, c.action, inputs);
    } catch (const std::exception& e) {
      ranks_[c.span.rank].reader().fail(
          "traceEvents", trace_action_name(p, c.action) + " on device " + std::to_string(c.device) +
                             " is not an action of the plan: " + e.what());
    }
    for (const schedules::Route& r : inputs) {
      const Span* from = nullptr;
      if (r.device == schedules::kLoader) {
        const auto it = loads_.find(r.minibatch);
        if (it != loads_.end()) from = &it->second;
      } else {
        const int vs = p.virtual_stage(p.stage_of(r.device), r.chunk);
        const auto it =
            producers_.find({vs, static_cast<int>(r.op), r.minibatch, r.slice.begin, r.slice.end});
        if (it != producers_.end()) from = &it->second;
      }
      if (from != nullptr && from->rank != c.span.rank)
        flow(*from, c.span, trace_port_name(r.port));
    }
  }
  for (const auto& [key, report] : losses_) {
    const auto it = producers_.find(key);
    if (it != producers_.end() && it->second.rank != report.rank) flow(it->second, report, "loss");
  }
}

// The processes' names and order, then each track's name and order in its owner's process.
json Merger::metadata(const json& tracks) const {
  json out = json::array();
  const std::string kind(schedules::to_string(layout_.params.kind));
  for (std::size_t k = 0; k < ranks_.size(); ++k) {
    const TraceProcess& p = ranks_[k].process;
    const std::string name =
        "tandem pipeline: " + kind + ", rank " + std::to_string(p.rank) + " (" + p.host + ")";
    out.push_back({{"name", "process_name"},
                   {"ph", "M"},
                   {"pid", pid(k)},
                   {"tid", 0},
                   {"args", {{"name", name}}}});
    out.push_back({{"name", "process_sort_index"},
                   {"ph", "M"},
                   {"pid", pid(k)},
                   {"tid", 0},
                   {"args", {{"sort_index", p.rank}}}});
  }
  for (const json& t : tracks) {
    const auto tid = t["tid"].get<std::int64_t>();
    const auto k = static_cast<std::size_t>(layout_.tracks.at(tid).owner);
    const auto it = names_.find({k, tid});
    if (it == names_.end()) continue;
    for (json m : it->second) {
      m["pid"] = pid(k);
      out.push_back(std::move(m));
    }
  }
  return out;
}

// The plan's metadata once, each track with the rank it ran in, and the job.
json Merger::meta(json tracks, const std::string& clock) const {
  std::int64_t minibatches = std::numeric_limits<std::int64_t>::max();
  json job_ranks = json::array();
  std::size_t first = 0;
  for (std::size_t k = 0; k < ranks_.size(); ++k) {
    const Rank& r = ranks_[k];
    minibatches = std::min(minibatches, r.minibatches);
    if (r.shift_ns == 0) first = k;
    job_ranks.push_back(
        {{"rank", r.process.rank}, {"host", r.process.host}, {"shift_ns", r.shift_ns}});
  }
  json meta = ranks_.front().input->trace["tandem"];
  meta.erase("process");
  meta["schedule"]["minibatches"] = minibatches;
  meta["tracks"] = std::move(tracks);
  meta["clock"] = ranks_[first].clock;
  meta["job"] = {{"id", ranks_.front().process.job},
                 {"world_size", ranks_.front().process.world_size},
                 {"clock", clock},
                 {"ranks", std::move(job_ranks)}};
  return meta;
}

json Merger::result(const std::string& clock) {
  std::stable_sort(events_.begin(), events_.end(), [](const json& a, const json& b) {
    return a["ts"].get<double>() < b["ts"].get<double>();
  });
  // A track none of the ranks ran anything on is drawn in the lowest rank's process (ranks_
  // is in rank order).
  json tracks = json::array();
  for (json t : ranks_.front().input->trace["tandem"]["tracks"]) {
    Track& track = layout_.tracks.at(t["tid"].get<std::int64_t>());
    if (track.owner < 0) track.owner = 0;
    t["rank"] = ranks_[static_cast<std::size_t>(track.owner)].process.rank;
    tracks.push_back(std::move(t));
  }
  json events = metadata(tracks);
  for (json& e : events_) events.push_back(std::move(e));
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ns"},
          {"tandem", meta(std::move(tracks), clock)}};
}

}  // namespace

void mark_trace_process(nlohmann::json& trace, const TraceProcess& process) {
  trace["tandem"]["process"] = {{"rank", process.rank},
                                {"world_size", process.world_size},
                                {"job", process.job},
                                {"host", process.host}};
}

nlohmann::json merge_traces(const std::vector<TraceInput>& inputs) {
  if (inputs.empty()) throw std::runtime_error("trace merge: no traces given");
  std::vector<Rank> ranks;
  for (const TraceInput& in : inputs) ranks.push_back(read_rank(in));
  check_one_job(ranks);
  std::sort(ranks.begin(), ranks.end(),
            [](const Rank& a, const Rank& b) { return a.process.rank < b.process.rank; });
  Layout layout = read_layout(ranks.front());
  const std::string clock = align(ranks);
  Merger merger(ranks, layout);
  for (std::size_t k = 0; k < ranks.size(); ++k) merger.add(k);
  merger.add_flows_between_ranks();
  return merger.result(clock);
}

}  // namespace tandem::train
