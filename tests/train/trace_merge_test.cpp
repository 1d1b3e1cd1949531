// One trace per job: `tandem trace merge` puts the ranks' traces of a multi-process job on one
// clock with every rank's stages, arrows between ranks included, so that `tandem trace
// summarize` reads it as the trace of the same plan in one process; a job run by `tandem launch`
// with `--trace FILE` yields that one trace at FILE; and the merge refuses what is not one job's
// set of rank traces, naming the file and the field.
#include "train/trace_merge.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "apps/trace_summary.hpp"
#include "run_command.hpp"
#include "temp_dir.hpp"
#include "tests/actors/pipeline_harness.hpp"
#include "train/job_trace.hpp"
#include "train/pipeline_trace.hpp"
#include "train/schedule_json.hpp"
#include "train/trace_file.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using schedules::ScheduleKind;
using schedules::ScheduleParams;

json traced_run(const ScheduleParams& params) {
  static const models::Model model = actors::testing::tiny_mlp();
  actors::PipelineSpec spec;
  spec.model = &model;
  spec.plan = actors::testing::even_plan(model, params);
  spec.optimizer = actors::testing::sgd_momentum();
  spec.seed = 3;
  const std::int64_t samples = params.samples();
  spec.data = [samples](std::int64_t b) {
    return actors::testing::make_minibatch(model, samples, b);
  };
  train::PipelineTrace trace;
  trace.attach(spec);
  actors::Pipeline pipeline(std::move(spec), actors::testing::make_scheduler(true));
  (void)pipeline.run();
  return trace.to_json();
}

// What rank `rank` of a job that ran `single`'s plan would have written, hosting the tracks
// `tids`: their slices, the arrows between them, its zero at its first slice, and where that
// zero lies on the clocks (`steady_skew_ns` added to its steady_clock reading, as another boot's
// clock would be).
json rank_part(const json& single, int rank, const std::set<std::int64_t>& tids,
               const std::string& boot_id, std::int64_t steady_skew_ns = 0) {
  std::map<std::uint64_t, int> ends;  // flow id -> ends on these tracks
  double origin = 1e300;
  for (const json& e : single["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" || tids.count(e["tid"].get<std::int64_t>()) == 0) continue;
    if (ph == "X") origin = std::min(origin, e["ts"].get<double>());
    if (ph == "s" || ph == "f") ++ends[e["id"].get<std::uint64_t>()];
  }
  json out = single;
  out["traceEvents"] = json::array();
  for (json e : single["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph != "M") {
      if (tids.count(e["tid"].get<std::int64_t>()) == 0) continue;
      if ((ph == "s" || ph == "f") && ends[e["id"].get<std::uint64_t>()] != 2) continue;
      e["ts"] = e["ts"].get<double>() - origin;
    }
    out["traceEvents"].push_back(e);
  }
  json& clock = out["tandem"]["clock"];
  const auto shift = static_cast<std::int64_t>(std::llround(origin * 1000));
  clock["steady_ns"] = clock["steady_ns"].get<std::int64_t>() + shift + steady_skew_ns;
  clock["system_ns"] = clock["system_ns"].get<std::int64_t>() + shift;
  clock["boot_id"] = boot_id;
  train::mark_trace_process(out, {rank, 2, "job-a", "10.0.0." + std::to_string(rank + 1)});
  return out;
}

// Rank 0 hosts the loader, the coordinator and the first half of the devices.
std::pair<json, json> split(const json& single, const std::string& boot1, std::int64_t skew) {
  std::set<std::int64_t> first, second;
  const ScheduleParams p = train::schedule_from_json(single["tandem"]["schedule"]);
  for (const json& t : single["tandem"]["tracks"]) {
    const bool late = t["kind"] == "stage" && t["device"].get<int>() >= p.total_replicas() / 2;
    (late ? second : first).insert(t["tid"].get<std::int64_t>());
  }
  return {rank_part(single, 0, first, "boot-a"), rank_part(single, 1, second, boot1, skew)};
}

std::map<std::string, int> count_phases(const json& trace) {
  std::map<std::string, int> out;
  for (const json& e : trace["traceEvents"]) ++out[e["ph"].get<std::string>()];
  return out;
}

void expect_same_summary(const TraceSummary& a, const TraceSummary& b) {
  ASSERT_EQ(a.replicas.size(), b.replicas.size());
  for (std::size_t i = 0; i < a.replicas.size(); ++i) {
    EXPECT_EQ(a.replicas[i].actions, b.replicas[i].actions) << "device " << i;
    EXPECT_NEAR(a.replicas[i].busy_s, b.replicas[i].busy_s, 1e-9) << "device " << i;
    EXPECT_NEAR(a.replicas[i].utilization, b.replicas[i].utilization, 1e-6) << "device " << i;
  }
  EXPECT_NEAR(a.span_s, b.span_s, 1e-8);
  EXPECT_NEAR(a.bubble, b.bubble, 1e-6);
  EXPECT_NEAR(a.message_delay_s, b.message_delay_s, 1e-8);
  EXPECT_NEAR(a.step_s, b.step_s, 1e-8);
  EXPECT_NEAR(a.predicted_step_s, b.predicted_step_s, 1e-8);
  EXPECT_NEAR(a.ratio, b.ratio, 1e-4);
  EXPECT_EQ(a.loads, b.loads);
  EXPECT_EQ(a.losses, b.losses);
}

class MergeOfARun : public ::testing::TestWithParam<ScheduleParams> {};

// Split at any clock offset, on one boot (steady_clock) or two (system_clock), the merge is the
// run: every slice back at its time, every arrow back (those between ranks rebuilt), and the
// same summary.
TEST_P(MergeOfARun, IsTheRunItWasSplitFrom) {
  const json single = traced_run(GetParam());
  for (const bool one_boot : {true, false}) {
    // On two boots the steady clocks disagree by hours; the system clock still aligns them.
    const auto [r0, r1] = split(single, one_boot ? "boot-a" : "boot-b",
                                one_boot ? 0 : std::int64_t{7'200'000'000'000});
    const json merged = train::merge_traces({{"r1.json", r1}, {"r0.json", r0}});
    EXPECT_EQ(merged["tandem"]["job"]["clock"], one_boot ? "steady_clock" : "system_clock");
    EXPECT_FALSE(merged["tandem"].contains("process"));
    const auto before = count_phases(single);
    const auto after = count_phases(merged);
    EXPECT_EQ(after.at("X"), before.at("X"));
    EXPECT_EQ(after.at("s"), before.at("s"));
    EXPECT_EQ(after.at("f"), before.at("f"));
    std::set<std::uint64_t> ids;
    std::map<std::int64_t, std::set<int>> pids;  // tid -> pids with slices on it
    for (const json& e : merged["traceEvents"]) {
      if (e["ph"] == "s") {
        EXPECT_TRUE(ids.insert(e["id"].get<std::uint64_t>()).second);
      }
      if (e["ph"] == "X") pids[e["tid"].get<std::int64_t>()].insert(e["pid"].get<int>());
    }
    for (const auto& [tid, in] : pids) EXPECT_EQ(in.size(), 1u) << "track " << tid;
    expect_same_summary(summarize_trace(single, "single"), summarize_trace(merged, "merged"));
  }
}

ScheduleParams params(ScheduleKind kind, int stages, std::vector<int> replicas, int slices,
                      std::int64_t minibatch, int chunks = 1, std::int64_t minibatches = 3) {
  ScheduleParams p;
  p.kind = kind;
  p.stages = stages;
  p.replicas = std::move(replicas);
  p.slices = slices;
  p.minibatch_size = minibatch;
  p.chunks = chunks;
  p.minibatches = minibatches;
  return p;
}

INSTANTIATE_TEST_SUITE_P(Schedules, MergeOfARun,
                         ::testing::Values(params(ScheduleKind::one_f_one_b, 4, {}, 4, 8),
                                           params(ScheduleKind::pipedream, 3, {1, 2, 1}, 1, 4, 1,
                                                  5),
                                           params(ScheduleKind::interleaved, 2, {}, 4, 8, 2),
                                           params(ScheduleKind::zb_h1, 3, {}, 3, 6)));

std::string merge_error(const std::vector<train::TraceInput>& inputs) {
  try {
    (void)train::merge_traces(inputs);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TraceMerge, RefusesWhatIsNotOneJobsRankTraces) {
  const json single = traced_run(params(ScheduleKind::one_f_one_b, 2, {}, 2, 4));
  const auto [r0, r1] = split(single, "boot-a", 0);
  const auto has = [](const std::string& what, const std::string& part) {
    return what.find(part) != std::string::npos;
  };
  std::string e = merge_error({{"a.json", r0}, {"b.json", r0}});
  EXPECT_TRUE(has(e, "b.json: tandem.process.rank: rank 0 is given twice (also a.json)")) << e;
  e = merge_error({{"a.json", r0}});
  EXPECT_TRUE(has(e, "no trace of rank 1")) << e;
  e = merge_error({{"a.json", r0}, {"one.json", single}});
  EXPECT_TRUE(has(e, "one.json: tandem.process: missing")) << e;
  json other = r1;
  other["tandem"]["process"]["job"] = "job-b";
  e = merge_error({{"a.json", r0}, {"b.json", other}});
  EXPECT_TRUE(has(e, "b.json: tandem.process.job")) << e;
  EXPECT_TRUE(has(e, "different jobs")) << e;
  other = r1;
  other["tandem"]["schedule"]["slices"] = 1;
  e = merge_error({{"a.json", r0}, {"b.json", other}});
  EXPECT_TRUE(has(e, "b.json: tandem.schedule: differs from a.json's")) << e;
  EXPECT_TRUE(has(e, "different plans")) << e;
  other = r1;
  other["tandem"]["process"]["rank"] = "one";
  e = merge_error({{"a.json", r0}, {"b.json", other}});
  EXPECT_TRUE(has(e, "b.json: tandem.process.rank: expected an integer")) << e;
  other = r1;
  other["tandem"]["process"]["rank"] = 2;
  e = merge_error({{"a.json", r0}, {"b.json", other}});
  EXPECT_TRUE(has(e, "b.json: tandem.process.rank: 2 is outside [0, 1]")) << e;
  other = r1;
  other["tandem"]["clock"]["system_ns"] = -1;
  other["tandem"]["clock"]["boot_id"] = "";
  e = merge_error({{"a.json", r0}, {"b.json", other}});
  EXPECT_TRUE(has(e, "b.json: tandem.clock.system_ns")) << e;
  // Events: of the right types, on the plan's tracks, each track in one rank.
  other = r1;
  for (json& ev : other["traceEvents"]) {
    if (ev["ph"] == "X") {
      ev["ts"] = "soon";
      break;
    }
  }
  e = merge_error({{"a.json", r0}, {"b.json", other}});
  EXPECT_TRUE(has(e, "b.json: traceEvents[")) << e;
  EXPECT_TRUE(has(e, "].ts: expected a number")) << e;
  other = r1;
  for (json& ev : other["traceEvents"]) {
    if (ev["ph"] == "X") ev["tid"] = 99;
  }
  e = merge_error({{"a.json", r0}, {"b.json", other}});
  EXPECT_TRUE(has(e, "track 99 is not in tandem.tracks")) << e;
  other = r1;
  for (const json& ev : r0["traceEvents"]) {
    if (ev["ph"] == "X") other["traceEvents"].push_back(ev);
  }
  e = merge_error({{"a.json", r0}, {"b.json", other}});
  EXPECT_TRUE(has(e, "b.json: traceEvents[")) << e;
  EXPECT_TRUE(has(e, "has slices in a.json too")) << e;
  e = merge_error({{"a.json", r0}, {"b.json", json::array()}});
  EXPECT_TRUE(has(e, "b.json: (top): expected a JSON object")) << e;
}

// What a trace file may hold, checked before anything uses it: nesting a trace never has (it
// overflowed the stack), a number no double holds (1e999 escaped as the JSON library's own
// text), and a count that does not fit (2^31 stages wrapped to -2^31 and was reported so).
TEST(TraceFile, RefusesDeepNestingNumbersThatOverflowAndCountsThatDoNotFit) {
  const auto refusal = [](const std::string& text, const std::string& source) {
    try {
      (void)train::parse_trace(text, source);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::string e = refusal(std::string(100000, '[') + std::string(100000, ']'), "deep.json");
  EXPECT_EQ(e.rfind("deep.json: JSON nests deeper than 32 levels", 0), 0u) << e;
  e = refusal(R"({"traceEvents": [{"ph": "X", "ts": 1e999}]})", "inf.json");
  EXPECT_EQ(e.rfind("inf.json: not valid JSON", 0), 0u) << e;
  EXPECT_NE(e.find("1e999"), std::string::npos) << e;
  EXPECT_NO_THROW((void)train::parse_trace(R"({"a": [[[{"b": [1]}]]]})", "shallow.json"));

  json schedule = train::schedule_to_json(params(ScheduleKind::one_f_one_b, 2, {}, 2, 4));
  schedule["stages"] = std::int64_t{1} << 31;
  try {
    (void)train::schedule_from_json(schedule);
    ADD_FAILURE() << "2^31 stages read";
  } catch (const std::runtime_error& err) {
    EXPECT_NE(std::string(err.what()).find("2147483648 (not an integer that fits)"),
              std::string::npos)
        << err.what();
  }
}

// The job's name in its traces is its own and reveals nothing of the nonce.
TEST(TraceMerge, AJobIsNamedByADigestOfItsNonce) {
  transport::JobNonce a{}, b{};
  b[31] = 1;
  EXPECT_EQ(train::trace_job_id(a), train::trace_job_id(a));
  EXPECT_NE(train::trace_job_id(a), train::trace_job_id(b));
  EXPECT_EQ(train::trace_job_id(a).size(), 32u);
}

const std::string kTandem = TANDEM_CLI;

TEST(TraceMergeCommand, MergesFilesAndNamesTheFileItRefuses) {
  testing::TempDir dir;
  const json single = traced_run(params(ScheduleKind::gpipe, 2, {}, 4, 8));
  const auto [r0, r1] = split(single, "boot-a", 0);
  const fs::path a = dir.path() / "run.json", b = dir.path() / "run.rank1.json";
  const fs::path out = dir.path() / "job.json";
  train::write_trace_file(r0, a);
  train::write_trace_file(r1, b);
  testing::CommandResult r = testing::run_command(kTandem + " trace merge " + out.string() + " " +
                                                  a.string() + " " + b.string());
  ASSERT_EQ(r.code, 0) << r.output;
  expect_same_summary(summarize_trace(single, "single"), summarize_trace_file(out));
  r = testing::run_command(kTandem + " trace summarize " + out.string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("a job of 2 processes"), std::string::npos) << r.output;
  // One rank's trace is not the job's: summarize says how to get the job's.
  r = testing::run_command(kTandem + " trace summarize " + a.string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(a.string() + ": the trace of rank 0 of a 2-process job"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tandem trace merge"), std::string::npos) << r.output;

  r = testing::run_command(kTandem + " trace merge " + out.string() + " " + a.string() + " " +
                           a.string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(a.string() + ": tandem.process.rank: rank 0 is given twice"),
            std::string::npos)
      << r.output;
  const fs::path bad = dir.write("bad.json", "{\"traceEvents\": [");
  r = testing::run_command(kTandem + " trace merge " + out.string() + " " + a.string() + " " +
                           bad.string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(bad.string() + ": not valid JSON"), std::string::npos) << r.output;
  // Past the bound, the size alone refuses it (a sparse file: nothing is written).
  const fs::path huge = dir.path() / "huge.json";
  std::ofstream(huge).close();
  fs::resize_file(huge, train::kMaxTraceBytes + 1);
  r = testing::run_command(kTandem + " trace merge " + out.string() + " " + a.string() + " " +
                           huge.string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(
      r.output.find(huge.string() + ": " + std::to_string(train::kMaxTraceBytes + 1) + " bytes"),
      std::string::npos)
      << r.output;
  r = testing::run_command(kTandem + " trace merge " + a.string() + " " + a.string() + " " +
                           b.string());
  EXPECT_EQ(r.code, 2) << r.output;
}

// Two balanced stages whose actions take milliseconds, so that the schedule, not the
// runtime's overhead, sets the bubble.
const std::string kJobConfig =
    "model: {name: mlp, widths: [768, 768, 768, 768, 768]}\n"
    "data: {kind: teacher, samples: 4096, seed: 1, hidden: 8}\n"
    "train:\n  minibatch: 128\n  steps: 16\n  optimizer: {kind: adamw, lr: 1.0e-3}\n"
    "  seed: 3\n  log_every: 10\n"
    "pipeline:\n  schedule: 1f1b\n  slices: 8\n"
    "  stages:\n    - {layers: \"0-1\"}\n    - {layers: \"2-3\"}\n";

// `tandem launch -n 2 ... --trace FILE`: FILE is the job's one trace, every stage with every
// action and every message of the same plan run in one process, each rank owning its tracks.
// How close its summary's figures come to the one process's is a measurement of two real runs
// on a shared machine, not a property of the trace: scripts/bench-trace-job measures it and
// docs/benchmarks.md records it ("One trace per job"); the merge's own exactness is the
// split-and-merge tests' above.
TEST(TraceMergeCommand, ATwoProcessJobWritesOneTraceOfTheJob) {
  testing::TempDir dir;
  const fs::path config = dir.write("c.yaml", kJobConfig);
  const fs::path one = dir.path() / "one.json", job = dir.path() / "job.json";
  testing::CommandResult r = testing::run_command(kTandem + " train " + config.string() +
                                                  " --quiet --trace " + one.string());
  ASSERT_EQ(r.code, 0) << r.output;
  r = testing::run_command(kTandem + " launch -n 2 " + config.string() + " --quiet --trace " +
                           job.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir.path() / "job.rank1.json"));
  const TraceSummary alone = summarize_trace_file(one);
  const TraceSummary merged = summarize_trace_file(job);
  EXPECT_EQ(merged.processes, 2);
  EXPECT_EQ(merged.clock, "steady_clock");
  ASSERT_EQ(merged.replicas.size(), alone.replicas.size());
  for (std::size_t i = 0; i < alone.replicas.size(); ++i) {
    EXPECT_GT(merged.replicas[i].actions, 0) << "stage " << merged.replicas[i].stage;
    EXPECT_EQ(merged.replicas[i].actions, alone.replicas[i].actions);
  }
  EXPECT_EQ(merged.loads, alone.loads);
  EXPECT_EQ(merged.losses, alone.losses);
  const json trace = train::read_trace_file(job);
  EXPECT_EQ(count_phases(trace).at("s"), count_phases(train::read_trace_file(one)).at("s"));
  std::set<int> ranks;
  for (const json& t : trace["tandem"]["tracks"]) ranks.insert(t["rank"].get<int>());
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
}

}  // namespace
}  // namespace tandem::apps
