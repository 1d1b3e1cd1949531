// Pipeline::progress: a stage stuck in an action is named with its action and its count stands
// still; stages that wait for inputs from elsewhere have no work; a run that goes on counts up;
// before and after run() nothing is work. Sampled from another thread, as a watchdog does.
#include "actors/pipeline_progress.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/stage_progress.hpp"
#include "tests/actors/gate_layer.hpp"
#include "tests/actors/pipeline_harness.hpp"

namespace tandem::actors::testing {
namespace {

using schedules::Action;
using schedules::Op;
using schedules::ScheduleKind;
using schedules::ScheduleParams;
using Clock = std::chrono::steady_clock;

constexpr auto kDeadline = std::chrono::seconds(60);

// run() on a thread of its own; `before_join` (opening a gate, stopping the run) lets it end.
class BackgroundRun {
 public:
  BackgroundRun(Pipeline& pipeline, std::function<void()> before_join)
      : before_join_(std::move(before_join)), thread_([this, &pipeline] {
          try {
            pipeline.run();
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  ~BackgroundRun() {
    if (thread_.joinable()) join();
  }
  // The run's error, if it threw.
  std::exception_ptr join() {
    before_join_();
    thread_.join();
    return error_;
  }

 private:
  std::function<void()> before_join_;
  std::exception_ptr error_;
  std::thread thread_;
};

// Samples progress() until `ok` holds (true) or the deadline passes (false).
bool eventually(const Pipeline& pipeline, const std::function<bool(const PipelineProgress&)>& ok,
                PipelineProgress* last) {
  const auto until = Clock::now() + kDeadline;
  for (;;) {
    *last = pipeline.progress();
    if (ok(*last)) return true;
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

ScheduleParams one_f_one_b(int stages, std::int64_t minibatches) {
  ScheduleParams p;
  p.kind = ScheduleKind::one_f_one_b;
  p.stages = stages;
  p.slices = 2;
  p.minibatch_size = 8;
  p.minibatches = minibatches;
  return p;
}

PipelineSpec spec_for(const models::Model& model, const ScheduleParams& p) {
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.data = [&model](std::int64_t b) { return make_minibatch(model, 8, b); };
  return spec;
}

TEST(PipelineProgress, AStageStuckInForwardIsNamedWithItsActionAndTheOthersAreNotBlamed) {
  auto gate = std::make_shared<Gate>();
  // 5 layers over 3 stages: [0,1), [1,3), [3,5); the gate (layer 2) is stage 1's.
  const models::Model model = gated_mlp(gate, 2);
  Pipeline pipeline(spec_for(model, one_f_one_b(3, 4)), make_scheduler(true));
  EXPECT_FALSE(pipeline.progress().has_work) << "before run()";
  BackgroundRun run(pipeline, [&] { gate->open(); });
  ASSERT_TRUE(gate->wait_held(kDeadline));

  // Stage 1 stays at its first forward; stages 0 and 2 go idle once they wait for it.
  PipelineProgress p;
  const std::string stuck = "stage 1 replica 0: running F(mb 0, [0,4)) for ";
  ASSERT_TRUE(eventually(
      pipeline,
      [&](const PipelineProgress& q) {
        return q.has_work && q.waiting_for.rfind(stuck, 0) == 0 &&
               q.waiting_for.find('\n') == std::string::npos;
      },
      &p))
      << p.waiting_for;
  const StageProgress held = pipeline.stage(1).progress();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const PipelineProgress later = pipeline.progress();
  EXPECT_TRUE(later.has_work);
  EXPECT_TRUE(contains(later.waiting_for, stuck)) << later.waiting_for;
  EXPECT_EQ(pipeline.stage(1).progress().events, held.events) << "its worker is held";
  ASSERT_TRUE(held.running.has_value());
  EXPECT_EQ(held.running->op, Op::F);
  EXPECT_FALSE(pipeline.stage(0).progress().has_work()) << pipeline.stage(0).progress().describe();
  EXPECT_FALSE(pipeline.stage(2).progress().has_work()) << pipeline.stage(2).progress().describe();

  EXPECT_EQ(run.join(), nullptr);
  const PipelineProgress after = pipeline.progress();
  EXPECT_FALSE(after.has_work) << after.waiting_for;
  EXPECT_TRUE(after.waiting_for.empty());
  EXPECT_GT(after.completed, later.completed);
}

TEST(PipelineProgress, ACountThatStandsStillWhileTheOnlyStageIsHeldWithMessagesUnhandled) {
  auto gate = std::make_shared<Gate>();
  const models::Model model = gated_mlp(gate, 1);
  Pipeline pipeline(spec_for(model, one_f_one_b(1, 3)), make_scheduler(true));
  BackgroundRun run(pipeline, [&] { gate->open(); });
  ASSERT_TRUE(gate->wait_held(kDeadline));
  // The loader sends both slices of minibatch 0 at once: the second's input and target wait in
  // the stage's inbox while its worker is held in the first's forward.
  PipelineProgress held;
  ASSERT_TRUE(eventually(
      pipeline,
      [](const PipelineProgress& q) {
        // The loader done with its handler (it builds a minibatch ahead once the window is full).
        return q.has_work && contains(q.waiting_for, "unhandled") &&
               q.waiting_for.find('\n') == std::string::npos;
      },
      &held))
      << held.waiting_for;
  EXPECT_TRUE(contains(held.waiting_for, "stage 0 replica 0: running F(mb 0, [0,4))"))
      << held.waiting_for;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const PipelineProgress p = pipeline.progress();
    EXPECT_TRUE(p.has_work);
    EXPECT_EQ(p.completed, held.completed) << "nothing here can move";
  }
  EXPECT_EQ(run.join(), nullptr);
  EXPECT_FALSE(pipeline.progress().has_work);
  EXPECT_GT(pipeline.progress().completed, held.completed);
}

TEST(PipelineProgress, AStageWhoseInputsComeFromElsewhereHasNoWork) {
  const models::Model model = tiny_mlp();
  PipelineSpec spec = spec_for(model, one_f_one_b(2, 4));
  // Only stage 1 here: stage 0 and the loader, which feed it, run "elsewhere" (nowhere).
  spec.hosts = [](transport::Endpoint e) { return e == 1; };
  Pipeline pipeline(std::move(spec), make_scheduler(true));
  BackgroundRun run(pipeline, [&] { pipeline.stop_with_error("the test is over"); });
  // It took its first action and waits for its input.
  PipelineProgress p;
  ASSERT_TRUE(eventually(
      pipeline, [](const PipelineProgress& q) { return q.completed >= 1; }, &p));
  EXPECT_FALSE(p.has_work) << p.waiting_for;
  EXPECT_TRUE(p.waiting_for.empty()) << p.waiting_for;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_FALSE(pipeline.progress().has_work) << pipeline.progress().waiting_for;
  }
  const StageProgress s = pipeline.stage(1).progress();
  ASSERT_TRUE(s.next.has_value());
  EXPECT_EQ(s.next->op, Op::F);
  EXPECT_EQ(s.next->minibatch, 0);
  EXPECT_EQ(s.describe(), "stage 1 replica 0: next F(mb 0, [0,4)) waits for inputs");
  EXPECT_NE(run.join(), nullptr) << "stop_with_error ends the run with an error";
  EXPECT_FALSE(pipeline.progress().has_work);
}

TEST(PipelineProgress, ALoaderStuckInItsDataSourceIsNamedAndTheStagesItStarvesAreNot) {
  const models::Model model = tiny_mlp();
  PipelineSpec spec = spec_for(model, one_f_one_b(2, 4));
  auto gate = std::make_shared<Gate>();
  // Minibatch 1's data never comes until the gate opens (a dataset on a hung file system).
  spec.data = [&model, gate](std::int64_t b) {
    if (b == 1) gate->pass();
    return make_minibatch(model, 8, b);
  };
  Pipeline pipeline(std::move(spec), make_scheduler(true));
  BackgroundRun run(pipeline, [&] { gate->open(); });
  ASSERT_TRUE(gate->wait_held(kDeadline));
  PipelineProgress p;
  ASSERT_TRUE(eventually(
      pipeline,
      [](const PipelineProgress& q) {
        return q.has_work && q.waiting_for.rfind("loader: handling a message for ", 0) == 0 &&
               q.waiting_for.find('\n') == std::string::npos;
      },
      &p))
      << p.waiting_for;
  EXPECT_EQ(run.join(), nullptr);
  EXPECT_FALSE(pipeline.progress().has_work);
}

TEST(PipelineProgress, ACoordinatorStuckInOnMinibatchIsNamedWithTheReportsWaitingForIt) {
  const models::Model model = tiny_mlp();
  PipelineSpec spec = spec_for(model, one_f_one_b(2, 4));
  auto gate = std::make_shared<Gate>();
  spec.on_minibatch = [gate](std::int64_t b, const MinibatchReport&) {
    if (b == 0) gate->pass();
  };
  Pipeline pipeline(std::move(spec), make_scheduler(true));
  BackgroundRun run(pipeline, [&] { gate->open(); });
  ASSERT_TRUE(gate->wait_held(kDeadline));
  // The stages go on to their end; the later losses wait in the coordinator's inbox.
  PipelineProgress p;
  ASSERT_TRUE(eventually(
      pipeline,
      [](const PipelineProgress& q) {
        return q.has_work && q.waiting_for.rfind("coordinator: handling a message for ", 0) == 0 &&
               contains(q.waiting_for, "unhandled") &&
               q.waiting_for.find('\n') == std::string::npos;
      },
      &p))
      << p.waiting_for;
  EXPECT_TRUE(pipeline.stage(0).done());
  EXPECT_TRUE(pipeline.stage(1).done());
  EXPECT_EQ(run.join(), nullptr);
  EXPECT_FALSE(pipeline.progress().has_work);
}

// From inside each action (the observer runs on the stage's thread, between the action's start
// and end): the action is reported running, by its stage, and the count has risen since that
// stage's previous action (which ended in between, and whatever else moved meanwhile).
TEST(PipelineProgress, EveryActionIsReportedRunningAndTheCountRisesFromActionToAction) {
  const models::Model model = tiny_mlp();
  for (bool threads : {false, true}) {
    ScheduleParams p = one_f_one_b(3, 6);
    p.replicas = {1, 2, 1};
    PipelineSpec spec = spec_for(model, p);
    Pipeline* self = nullptr;
    std::mutex mu;
    std::map<std::pair<int, int>, std::vector<std::uint64_t>> counts;  // by stage and replica
    spec.observer = [&](const StageEvent& e) {
      const PipelineProgress now = self->progress();
      EXPECT_TRUE(now.has_work);
      const std::string line = "stage " + std::to_string(e.stage) + " replica " +
                               std::to_string(e.replica) + ": running " +
                               schedules::to_string(e.action) + " for ";
      EXPECT_TRUE(contains(now.waiting_for, line)) << line << " in:\n" << now.waiting_for;
      std::lock_guard lock(mu);
      counts[{e.stage, e.replica}].push_back(now.completed);
    };
    Pipeline pipeline(std::move(spec), make_scheduler(threads));
    self = &pipeline;
    EXPECT_EQ(pipeline.progress().completed, 0u);
    pipeline.run();
    ASSERT_EQ(counts.size(), 4u);
    std::uint64_t highest = 0;
    for (const auto& [where, seen] : counts) {
      ASSERT_FALSE(seen.empty());
      for (std::size_t i = 1; i < seen.size(); ++i) {
        EXPECT_GT(seen[i], seen[i - 1]) << "stage " << where.first << " replica " << where.second
                                        << " action " << i << (threads ? " (threads)" : "");
      }
      highest = std::max(highest, seen.back());
    }
    const PipelineProgress after = pipeline.progress();
    EXPECT_FALSE(after.has_work) << after.waiting_for;
    EXPECT_TRUE(after.waiting_for.empty());
    EXPECT_GT(after.completed, highest);
  }
}

TEST(StageProgress, WorkIsWhatRunsOrWaitsHereNotWhatWaitsForOthers) {
  StageProgress s;
  s.stage = 2;
  s.replica = 1;
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(s.describe(), "stage 2 replica 1: idle");
  s.next = Action{Op::B, 4, {0, 2}};
  EXPECT_FALSE(s.has_work()) << "waits for its inputs";
  s.syncing = true;
  s.next.reset();
  EXPECT_FALSE(s.has_work()) << "waits for its replicas";
  s.syncing = false;
  s.device_ops = 2;
  s.oldest_op = Action{Op::F, 3, {2, 4}};
  s.oldest_op_s = 12.34;
  EXPECT_TRUE(s.has_work());
  EXPECT_EQ(s.describe(),
            "stage 2 replica 1: 2 device ops in flight, the oldest F(mb 3, [2,4)) started 12.3 s "
            "ago");
  s.device_ops = 0;
  s.oldest_op.reset();
  s.unhandled = 3;
  s.next = Action{Op::F, 5, {0, 2}};
  EXPECT_TRUE(s.has_work());
  EXPECT_EQ(s.describe(),
            "stage 2 replica 1: 3 messages unhandled; next F(mb 5, [0,2)) waits "
            "for inputs");
  s.unhandled = 0;
  s.next.reset();
  s.handling = true;
  s.running = Action{Op::B, 4, {0, 2}};
  s.running_s = 31.24;
  EXPECT_TRUE(s.has_work());
  EXPECT_EQ(s.describe(), "stage 2 replica 1: running B(mb 4, [0,2)) for 31.2 s");
  s.finished = true;
  EXPECT_FALSE(s.has_work()) << "its schedule is over";
}

}  // namespace
}  // namespace tandem::actors::testing
