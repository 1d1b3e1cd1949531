// The pipeline trace (`tandem train --trace`) and `tandem trace summarize`: the trace of a real
// run is well-formed Chrome trace JSON (slices closed, flows paired and forward in time, tracks
// in time order), has one track per replica plus the loader's and the coordinator's, names every
// action by its schedule token in the schedule's own order, and draws one arrow per tensor the
// routing sends; the summary of it is consistent with what ran.
#include "train/pipeline_trace.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "apps/trace_summary.hpp"
#include "apps/trainer_report.hpp"
#include "schedules/routing.hpp"
#include "schedules/schedule.hpp"
#include "schedules/text_form.hpp"
#include "tests/actors/pipeline_harness.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using schedules::Op;
using schedules::ScheduleKind;
using schedules::ScheduleParams;

struct Case {
  std::string name;
  ScheduleKind kind;
  int stages;
  std::vector<int> replicas;
  int slices;
  std::int64_t minibatch;
  int chunks = 1;
  std::int64_t minibatches = 3;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.name;
}

ScheduleParams params_of(const Case& c) {
  ScheduleParams p;
  p.kind = c.kind;
  p.stages = c.stages;
  p.replicas = c.replicas;
  p.slices = c.slices;
  p.minibatch_size = c.minibatch;
  p.chunks = c.chunks;
  p.minibatches = c.minibatches;
  return p;
}

json traced_run(const models::Model& model, const ScheduleParams& params) {
  actors::PipelineSpec spec;
  spec.model = &model;
  spec.plan = actors::testing::even_plan(model, params);
  spec.optimizer = actors::testing::sgd_momentum();
  spec.seed = 3;
  const std::int64_t samples = params.samples();
  spec.data = [&model, samples](std::int64_t b) {
    return actors::testing::make_minibatch(model, samples, b);
  };
  train::PipelineTrace trace;
  trace.attach(spec);
  actors::Pipeline pipeline(std::move(spec), actors::testing::make_scheduler(true));
  (void)pipeline.run();
  EXPECT_GT(trace.actions(), 0u);
  return trace.to_json();
}

struct Event {
  std::string ph, name, cat;
  std::int64_t tid = 0;
  double ts = 0, dur = 0;
  std::uint64_t id = 0;
};

// The Trace Event Format's required fields, and the events of every track in time order.
std::vector<Event> check_events(const json& j) {
  std::vector<Event> out;
  EXPECT_TRUE(j.contains("traceEvents") && j["traceEvents"].is_array());
  if (!j.contains("traceEvents")) return out;
  std::map<std::int64_t, double> last_ts;
  std::map<std::int64_t, int> open;  // B minus E per track
  for (const json& e : j["traceEvents"]) {
    Event ev;
    ev.ph = e.at("ph").get<std::string>();
    ev.tid = e.at("tid").get<std::int64_t>();
    EXPECT_TRUE(e.at("pid").is_number_integer());
    if (ev.ph == "M") continue;
    ev.ts = e.at("ts").get<double>();
    EXPECT_GE(ev.ts, 0.0) << e.dump();
    if (ev.ph != "E") ev.name = e.at("name").get<std::string>();
    ev.cat = e.value("cat", "");
    if (ev.ph == "X") {
      ev.dur = e.at("dur").get<double>();
      EXPECT_GE(ev.dur, 0.0) << e.dump();
    }
    if (ev.ph == "B") ++open[ev.tid];
    if (ev.ph == "E") {
      EXPECT_GE(--open[ev.tid], 0) << "an end without its begin: " << e.dump();
    }
    if (ev.ph == "s" || ev.ph == "f") ev.id = e.at("id").get<std::uint64_t>();
    const auto [it, fresh] = last_ts.emplace(ev.tid, ev.ts);
    if (!fresh) {
      EXPECT_GE(ev.ts, it->second) << "track " << ev.tid << " goes back in time at " << e.dump();
      it->second = ev.ts;
    }
    EXPECT_NE(std::string("BEXsf").find(ev.ph), std::string::npos) << e.dump();
    out.push_back(ev);
  }
  for (const auto& [tid, n] : open) EXPECT_EQ(n, 0) << "track " << tid << " leaves a slice open";
  return out;
}

std::map<std::int64_t, std::string> track_names(const json& j) {
  std::map<std::int64_t, std::string> out;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      EXPECT_TRUE(out.emplace(e["tid"].get<std::int64_t>(), e["args"]["name"]).second)
          << "a track named twice";
    }
  }
  return out;
}

// The slice of `track` that holds time `ts`, if any.
const Event* slice_at(const std::vector<Event>& events, std::int64_t track, double ts) {
  for (const Event& e : events) {
    if (e.ph == "X" && e.tid == track && e.ts <= ts && ts <= e.ts + e.dur) return &e;
  }
  return nullptr;
}

class TraceStructure : public ::testing::TestWithParam<Case> {};

TEST_P(TraceStructure, IsWellFormedAndFollowsTheSchedule) {
  const Case& c = GetParam();
  const models::Model model = actors::testing::tiny_mlp();
  const ScheduleParams params = params_of(c);
  const json j = traced_run(model, params);
  const std::vector<Event> events = check_events(j);
  const schedules::ActionList list = schedules::Schedule(params).materialize();
  const int R = params.total_replicas();

  // One track per replica, named after it, plus the loader and the coordinator.
  const auto names = track_names(j);
  ASSERT_EQ(names.size(), static_cast<std::size_t>(R + 2));
  std::map<std::string, std::int64_t> by_name;
  for (const auto& [tid, name] : names) by_name[name] = tid;
  ASSERT_TRUE(by_name.count("loader"));
  ASSERT_TRUE(by_name.count("coordinator"));
  std::vector<std::int64_t> stage_tracks;
  for (int d = 0; d < R; ++d) {
    const std::string name = "stage " + std::to_string(params.stage_of(d)) + " replica " +
                             std::to_string(params.replica_of(d)) + " (device " +
                             std::to_string(d) + ", cpu)";
    ASSERT_TRUE(by_name.count(name)) << "no track " << name;
    stage_tracks.push_back(by_name[name]);
  }
  for (const Event& e : events) EXPECT_TRUE(names.count(e.tid)) << "event on an unnamed track";

  // Every replica's slices, in time order, never overlap, and their names are the schedule's
  // own order in its text form.
  std::string text = schedules::format_actions(list);
  text = text.substr(0, text.find('\n') + 1);
  for (int d = 0; d < R; ++d) {
    text += "d" + std::to_string(d) + ":";
    double end = 0;
    for (const Event& e : events) {
      if (e.ph != "X" || e.tid != stage_tracks[d]) continue;
      EXPECT_GE(e.ts, end) << "overlapping actions on device " << d << " at " << e.name;
      end = e.ts + e.dur;
      EXPECT_EQ(e.cat, "action");
      text += " " + e.name;
    }
    text += "\n";
  }
  schedules::ActionList parsed;
  ASSERT_NO_THROW(parsed = schedules::parse_actions(text)) << text;
  ASSERT_EQ(parsed.devices.size(), list.devices.size());
  for (int d = 0; d < R; ++d) {
    ASSERT_EQ(parsed.devices[d].size(), list.devices[d].size()) << "device " << d;
    for (std::size_t i = 0; i < list.devices[d].size(); ++i) {
      const schedules::Action& want = list.devices[d][i];
      const schedules::Action& got = parsed.devices[d][i];
      EXPECT_TRUE(got.op == want.op && got.minibatch == want.minibatch && got.slice == want.slice &&
                  got.chunk == want.chunk)
          << "device " << d << " action " << i << ": traced " << schedules::to_string(got)
          << ", scheduled " << schedules::to_string(want);
    }
  }

  // Loader: one slice per minibatch; coordinator: one per last-stage forward.
  const std::int64_t V = params.stages * params.chunks;
  std::int64_t last_forwards = 0;
  std::size_t expected_flows = 0;
  const schedules::Routing routing(params);
  for (int d = 0; d < R; ++d) {
    for (const schedules::Action& a : list.devices[d]) {
      if (a.op != Op::F && a.op != Op::B) continue;
      expected_flows += routing.routes(d, a).inputs.size();
      if (a.op == Op::F && a.chunk * params.stages + params.stage_of(d) == V - 1) ++last_forwards;
    }
  }
  std::int64_t loads = 0, losses = 0;
  for (const Event& e : events) {
    if (e.ph != "X") continue;
    loads += e.tid == by_name["loader"] ? 1 : 0;
    losses += e.tid == by_name["coordinator"] ? 1 : 0;
  }
  EXPECT_EQ(loads, params.minibatches);
  EXPECT_EQ(losses, last_forwards);
  expected_flows += static_cast<std::size_t>(last_forwards);  // loss reports

  // Flows pair up: one start and one end per id, same name, the end not before the start, each
  // end inside a slice of its track, stage tracks sending only downstream (activations) or
  // upstream (gradients).
  std::map<std::uint64_t, std::pair<const Event*, const Event*>> flows;
  for (const Event& e : events) {
    if (e.ph == "s") {
      EXPECT_EQ(flows[e.id].first, nullptr) << "two starts for flow " << e.id;
      flows[e.id].first = &e;
    } else if (e.ph == "f") {
      EXPECT_EQ(flows[e.id].second, nullptr) << "two ends for flow " << e.id;
      flows[e.id].second = &e;
    }
  }
  EXPECT_EQ(flows.size(), expected_flows);
  std::map<std::int64_t, int> stage_of_track;
  for (int d = 0; d < R; ++d) stage_of_track[stage_tracks[d]] = params.stage_of(d);
  for (const auto& [id, f] : flows) {
    ASSERT_NE(f.first, nullptr) << "flow " << id << " has no start";
    ASSERT_NE(f.second, nullptr) << "flow " << id << " has no end";
    EXPECT_EQ(f.first->name, f.second->name);
    EXPECT_GE(f.second->ts, f.first->ts) << "flow " << id << " " << f.first->name;
    EXPECT_NE(slice_at(events, f.first->tid, f.first->ts), nullptr) << "unbound flow start";
    EXPECT_NE(slice_at(events, f.second->tid, f.second->ts), nullptr) << "unbound flow end";
    if (f.first->name == "activation" && params.chunks == 1) {
      EXPECT_EQ(stage_of_track[f.second->tid], stage_of_track[f.first->tid] + 1);
    }
    if (f.first->name == "gradient" && params.chunks == 1) {
      EXPECT_EQ(stage_of_track[f.second->tid], stage_of_track[f.first->tid] - 1);
    }
    if (f.first->name == "input" || f.first->name == "target") {
      EXPECT_EQ(f.first->tid, by_name["loader"]);
    }
    if (f.first->name == "loss") {
      EXPECT_EQ(f.second->tid, by_name["coordinator"]);
    }
  }

  // The plan travels with the trace.
  ASSERT_TRUE(j.contains("tandem"));
  const ScheduleParams back = train::schedule_from_json(j["tandem"]["schedule"]);
  EXPECT_EQ(schedules::format_actions(schedules::Schedule(back).materialize()),
            schedules::format_actions(list));
}

TEST_P(TraceStructure, SummaryMatchesTheRun) {
  const Case& c = GetParam();
  const models::Model model = actors::testing::tiny_mlp();
  const ScheduleParams params = params_of(c);
  const TraceSummary s = summarize_trace(traced_run(model, params), "run");
  const schedules::ActionList list = schedules::Schedule(params).materialize();
  ASSERT_EQ(s.replicas.size(), static_cast<std::size_t>(params.total_replicas()));
  for (std::size_t d = 0; d < s.replicas.size(); ++d) {
    const ReplicaUse& r = s.replicas[d];
    EXPECT_EQ(r.device, static_cast<int>(d));
    EXPECT_EQ(r.actions, static_cast<std::int64_t>(list.devices[d].size()));
    EXPECT_GT(r.busy_s, 0.0);
    EXPECT_GE(r.utilization, 0.0);
    EXPECT_LE(r.utilization, 1.0);
  }
  EXPECT_GE(s.bubble, 0.0);
  EXPECT_LT(s.bubble, 1.0);
  EXPECT_EQ(s.loads, params.minibatches);
  EXPECT_EQ(s.schedule.minibatches, params.minibatches);
  // Every F of a virtual stage was measured.
  ASSERT_EQ(s.durations.size(), static_cast<std::size_t>(params.stages * params.chunks));
  std::vector<std::int64_t> forwards(s.durations.size());
  for (int d = 0; d < params.total_replicas(); ++d) {
    for (const auto& a : list.devices[d]) {
      if (a.op == Op::F) ++forwards[a.chunk * params.stages + params.stage_of(d)];
    }
  }
  for (const VstageDurations& v : s.durations) {
    EXPECT_EQ(v.forwards, forwards[v.vstage]);
    EXPECT_GT(v.forward, 0.0);
    EXPECT_GT(v.backward, 0.0);
  }
  EXPECT_GT(s.span_s, 0.0);
  EXPECT_GT(s.predicted_makespan_s, 0.0);
  EXPECT_GT(s.predicted_step_s, 0.0);
  EXPECT_GT(s.ideal_step_s, 0.0);
  EXPECT_TRUE(std::isfinite(s.ratio));
  EXPECT_GT(s.ratio, 0.0);
  const std::string text = format_trace_summary(s);
  EXPECT_NE(text.find("utilization"), std::string::npos) << text;
  EXPECT_NE(text.find("simulated"), std::string::npos) << text;
  EXPECT_NE(text.find("ratio"), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, TraceStructure,
    ::testing::Values(
        Case{"one_f_one_b", ScheduleKind::one_f_one_b, 3, {}, 4, 8},
        Case{"pipedream_replicated", ScheduleKind::pipedream, 3, {1, 2, 1}, 1, 4, 1, 5},
        Case{"gpipe_replicated", ScheduleKind::gpipe, 2, {2, 1}, 4, 8},
        Case{"interleaved", ScheduleKind::interleaved, 2, {}, 4, 8, 2},
        Case{"zb_h1", ScheduleKind::zb_h1, 3, {}, 3, 6}),
    [](const ::testing::TestParamInfo<Case>& test) { return test.param.name; });

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / (name + "." + std::to_string(::getpid()));
}

TEST(TraceSummarize, RefusesWhatIsNotAPipelineTrace) {
  const auto message = [](const fs::path& p) {
    try {
      (void)summarize_trace_file(p);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const fs::path missing = temp_file("tandem-no-such-trace");
  fs::remove(missing);
  EXPECT_EQ(message(missing), missing.string() + ": no such file");
  EXPECT_EQ(message(fs::temp_directory_path()),
            fs::temp_directory_path().string() + ": not a regular file");
  const fs::path bad = temp_file("tandem-bad-trace");
  std::ofstream(bad) << "{\"traceEvents\": [";
  EXPECT_NE(message(bad).find(bad.string() + ": not valid JSON"), std::string::npos)
      << message(bad);
  std::ofstream(bad) << "{\"traceEvents\": []}";
  EXPECT_NE(message(bad).find(bad.string() + ": not a tandem pipeline trace"), std::string::npos)
      << message(bad);
  std::ofstream(bad) << "[1, 2]";
  EXPECT_NE(message(bad).find("not a Chrome trace"), std::string::npos) << message(bad);
  std::ofstream(bad) << R"({"traceEvents": [], "tandem": {"schedule": {"kind": "warp"},
                             "tracks": []}})";
  EXPECT_NE(message(bad).find("tandem.schedule.kind"), std::string::npos) << message(bad);
  std::ofstream(bad) << R"({"traceEvents": [], "tandem": {"schedule": {"kind": "1f1b",
                             "stages": 2, "slices": 2, "minibatches": 2}, "tracks": []}})";
  EXPECT_NE(message(bad).find("no stage actions"), std::string::npos) << message(bad);
  std::ofstream(bad) << R"({"traceEvents": [], "tandem": {"schedule": {"kind": "1f1b",
                             "stages": 4, "slices": 8, "minibatches": 100000000000}, "tracks": []}})";
  EXPECT_NE(message(bad).find("far more than the trace's events"), std::string::npos)
      << message(bad);
  fs::remove(bad);
}

TEST(TraceSummarize, ReadsTheFileTrainWrites) {
  const fs::path trace = temp_file("tandem-train-trace.json");
  std::ostringstream out;
  (void)run_train_command(
      TrainCommand{.config = fs::path(TANDEM_SOURCE_DIR) / "configs/mlp-pipeline-pipedream.yaml",
                   .steps = 3,
                   .trace = trace,
                   .quiet = true},
      out);
  const TraceSummary s = summarize_trace_file(trace);
  EXPECT_EQ(s.schedule.kind, ScheduleKind::pipedream);
  EXPECT_EQ(s.schedule.minibatches, 3);
  EXPECT_EQ(s.loads, 3);
  EXPECT_TRUE(std::isfinite(s.ratio));
  fs::remove(trace);
}

TEST(TraceSummarize, TrainRefusesATraceItCouldNotWrite) {
  std::ostringstream out;
  EXPECT_THROW((void)run_train_command(TrainCommand{.config = fs::path(TANDEM_SOURCE_DIR) /
                                                              "configs/mlp-pipeline-pipedream.yaml",
                                                    .steps = 1,
                                                    .trace = fs::temp_directory_path(),
                                                    .quiet = true},
                                       out),
               std::runtime_error);
  EXPECT_TRUE(out.str().empty()) << "trained before refusing: " << out.str();
}

}  // namespace
}  // namespace tandem::apps
