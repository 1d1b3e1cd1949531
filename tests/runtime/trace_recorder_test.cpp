// The trace is Chrome trace / Perfetto JSON: check the fields the format requires.
#include "runtime/trace_recorder.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/actor_system.hpp"
#include "runtime/manual_scheduler.hpp"

namespace tandem {
namespace {

struct Hop {
  static constexpr std::string_view kName = "test.hop";
  int left;
};

class Hopper final : public Actor {
 public:
  explicit Hopper(std::string n) : Actor(std::move(n)) {}
  Actor* peer = nullptr;

 protected:
  void on_message(Message& m) override {
    const int left = m.as<Hop>().left;
    if (left > 0) (void)send(peer, Hop{left - 1});
  }
};

// Required by the Trace Event Format: ph, ts, pid, tid; name except for 'E'; dur for 'X';
// id for flow events; metadata events carry args.name.
void check_event(const nlohmann::json& e) {
  ASSERT_TRUE(e.is_object());
  ASSERT_TRUE(e.contains("ph") && e["ph"].is_string());
  const std::string ph = e["ph"];
  ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer());
  ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer());
  if (ph != "M") {
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number()) << e.dump();
  }
  if (ph != "E") {
    ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e.dump();
  }
  if (ph == "X") {
    ASSERT_TRUE(e.contains("dur") && e["dur"].is_number());
    EXPECT_GE(e["dur"].get<double>(), 0.0);
  }
  if (ph == "s" || ph == "f") {
    ASSERT_TRUE(e.contains("id")) << e.dump();
  }
  if (ph == "M") {
    ASSERT_TRUE(e.contains("args") && e["args"].contains("name"));
  }
  EXPECT_NE(std::string("BEXsfM").find(ph), std::string::npos) << "unexpected phase " << ph;
}

TEST(TraceRecorder, ManualEventsProduceValidJson) {
  TraceRecorder trace;
  trace.set_track_name(3, "stage 0");
  trace.begin("F0", "compute", 3);
  trace.end(3);
  trace.complete("B0", "compute", 3, 10, 5);
  const auto id = trace.next_flow_id();
  trace.flow_start(id, 3, "send", 12);
  trace.flow_end(id, 4, "send", 20);
  const nlohmann::json j = trace.to_json();
  ASSERT_TRUE(j.contains("traceEvents"));
  ASSERT_EQ(j["traceEvents"].size(), 6u);
  for (const auto& e : j["traceEvents"]) check_event(e);
  EXPECT_EQ(j["traceEvents"][0]["ph"], "M");
  EXPECT_EQ(j["traceEvents"][0]["args"]["name"], "stage 0");
}

TEST(TraceRecorder, ActorSystemRecordsHandlersAndFlowsAndWritesAFile) {
  TraceRecorder trace;
  auto sched = make_manual();
  auto* manual = sched.get();
  ActorSystem system(std::move(sched), {.trace = &trace});
  auto* a = system.spawn<Hopper>("a");
  auto* b = system.spawn<Hopper>("b");
  a->peer = b;
  b->peer = a;
  ASSERT_TRUE(system.send(a, Hop{3}).ok());
  manual->run_until_idle();

  const auto path = std::filesystem::temp_directory_path() / "tandem_trace_test.json";
  trace.write(path.string());
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::filesystem::remove(path);

  int complete = 0, starts = 0, ends = 0, names = 0;
  for (const auto& e : j["traceEvents"]) {
    check_event(e);
    const std::string ph = e["ph"];
    complete += ph == "X";
    starts += ph == "s";
    ends += ph == "f";
    names += ph == "M";
    if (ph == "X") {
      EXPECT_EQ(e["name"], "test.hop");
    }
  }
  EXPECT_EQ(names, 2);     // one track per actor
  EXPECT_EQ(complete, 4);  // four messages handled
  EXPECT_EQ(starts, 4);    // each send starts a flow ...
  EXPECT_EQ(ends, 4);      // ... and its receive ends it
  EXPECT_THROW(trace.write("/nonexistent-dir/x.json"), std::runtime_error);
}

// Tools read a slice's arguments back (tandem trace summarize); viewers order tracks by the
// sort index and title the process.
TEST(TraceRecorder, SlicesCarryArgumentsAndTracksAnOrder) {
  TraceRecorder trace;
  trace.set_process_name("pipeline");
  trace.set_track_name(7, "loader");
  trace.set_track_sort_index(7, 0);
  trace.complete("F3", "action", 7, 1000, 500,
                 {{"minibatch", std::int64_t{3}}, {"op", std::string("F")}, {"share", 0.5}});
  trace.complete("B3", "action", 7, 2000, 500);
  const nlohmann::json j = trace.to_json();
  bool process = false, order = false;
  int slices = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      process = e["args"]["name"] == "pipeline";
    } else if (e["ph"] == "M" && e["name"] == "thread_sort_index") {
      order = e["tid"] == 7 && e["args"]["sort_index"] == 0;
    } else if (e["ph"] == "X" && e["name"] == "F3") {
      ++slices;
      EXPECT_EQ(e["args"]["minibatch"], 3);
      EXPECT_EQ(e["args"]["op"], "F");
      EXPECT_EQ(e["args"]["share"], 0.5);
      EXPECT_EQ(e["ts"], 1.0);  // microseconds
      EXPECT_EQ(e["dur"], 0.5);
    } else if (e["ph"] == "X") {
      ++slices;
      EXPECT_FALSE(e.contains("args")) << e.dump();
    }
  }
  EXPECT_TRUE(process);
  EXPECT_TRUE(order);
  EXPECT_EQ(slices, 2);
}

}  // namespace
}  // namespace tandem
