// `schedule: auto`: the config's pipeline takes the fastest schedule the planner ranks, on the
// config's own stages or with `partition: auto`; what it refuses names file:line; the dry run
// prints the ranking.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "apps/dry_run.hpp"
#include "schedules/schedule_kind.hpp"
#include "train/config.hpp"
#include "train/config_error.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;

// A GPT of 8 layers (embedding, 5 blocks, norm, head).
std::string config(const std::string& pipeline) {
  return "model: {name: gpt, layers: 5, d_model: 32, heads: 4, seq_len: 16, vocab: 32}\n"
         "data: {kind: markov-text, samples: 256}\n"
         "train: {minibatch: 16, steps: 10, optimizer: {kind: adamw, lr: 0.001}}\n"
         "pipeline:\n" +
         pipeline;
}

const char* kFourStages =
    "  stages:\n"
    "    - {layers: \"0-1\"}\n    - {layers: \"2-3\"}\n    - {layers: \"4-5\"}\n"
    "    - {layers: \"6-7\"}\n";

void expect_error(const std::string& text, int line, const std::string& words) {
  try {
    (void)train::parse_config(text, "auto.yaml");
    ADD_FAILURE() << "accepted:\n" << text;
  } catch (const train::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("auto.yaml:" + std::to_string(line) + ":"), std::string::npos) << msg;
    EXPECT_NE(msg.find(words), std::string::npos) << msg;
  }
}

TEST(ScheduleAuto, FixedStagesTakeTheFastestScheduleThatRunsThem) {
  const train::Config c =
      train::parse_config(config("  schedule: auto\n" + std::string(kFourStages)), "auto.yaml");
  ASSERT_TRUE(c.schedule_ranking.has_value());
  const planner::RankedSchedule* pick = c.schedule_ranking->pick();
  ASSERT_NE(pick, nullptr);
  EXPECT_EQ(c.pipeline->schedule, schedules::to_string(pick->kind));
  EXPECT_EQ(c.pipeline->stages.size(), 4u);
  EXPECT_FALSE(schedules::is_asynchronous(pick->kind));
  for (const planner::RankedSchedule& e : c.schedule_ranking->entries) {
    if (!e.dropped.empty()) continue;
    EXPECT_EQ(e.stages, 4) << e.name();  // the config's cut, not another
    EXPECT_GE(e.step_ms, pick->step_ms) << e.name();
  }
}

TEST(ScheduleAuto, ReplicatedStagesRankOnlySchedulesThatReplicate) {
  const train::Config c =
      train::parse_config(config("  schedule: auto\n  allow_async: true\n  stages:\n"
                                 "    - {layers: \"0-3\", replicas: 2}\n    - {layers: \"4-7\"}\n"),
                          "auto.yaml");
  for (const planner::RankedSchedule& e : c.schedule_ranking->entries) {
    const bool replicates = e.kind == schedules::ScheduleKind::gpipe ||
                            e.kind == schedules::ScheduleKind::one_f_one_b ||
                            e.kind == schedules::ScheduleKind::pipedream;
    EXPECT_EQ(e.dropped.empty(), replicates) << e.name() << ": " << e.dropped;
  }
  EXPECT_EQ(c.pipeline->stages.front().replicas, 2);
}

TEST(ScheduleAuto, AsynchronousSchedulesOnlyWhenAllowed) {
  const train::Config refused =
      train::parse_config(config("  schedule: auto\n" + std::string(kFourStages)), "auto.yaml");
  const train::Config allowed = train::parse_config(
      config("  schedule: auto\n  allow_async: true\n" + std::string(kFourStages)), "auto.yaml");
  int refused_async = 0, allowed_async = 0;
  for (const auto& e : refused.schedule_ranking->entries) {
    if (schedules::is_asynchronous(e.kind) && e.dropped.empty()) ++refused_async;
  }
  for (const auto& e : allowed.schedule_ranking->entries) {
    if (schedules::is_asynchronous(e.kind) && e.dropped.empty()) ++allowed_async;
  }
  EXPECT_EQ(refused_async, 0);
  EXPECT_EQ(allowed_async, 3);
}

TEST(ScheduleAuto, RefusalsNameFileAndLine) {
  expect_error(config("  schedule: 1f1b\n  allow_async: true\n" + std::string(kFourStages)), 6,
               "applies to schedule: auto only");
  expect_error(config("  schedule: auto\n  chunks: 2\n" + std::string(kFourStages)), 6,
               "auto chooses the chunks");
  expect_error(config("  schedule: auto\n  rematerialize: true\n" + std::string(kFourStages)), 6,
               "with and without re-materialization");
  expect_error(config("  schedule: auto\n  allow_async: sometimes\n" + std::string(kFourStages)), 6,
               "allow_async");
  expect_error(config("  schedule: automatic\n" + std::string(kFourStages)), 5, "auto)");
}

TEST(ScheduleAuto, DryRunPrintsTheRankingAndThePick) {
  const train::Config c = train::parse_config(
      config("  schedule: auto\n  allow_async: true\n" + std::string(kFourStages)), "auto.yaml");
  std::ostringstream out;
  dry_run(c, out);
  const std::string text = out.str();
  for (const char* words : {"schedule", "stages x replicas", "step ms", "bubble", "memory/device",
                            "<- pick", "gpipe+remat", "zb-v", "2bw", "umpipe", "4 x 1"}) {
    EXPECT_NE(text.find(words), std::string::npos) << words << " in\n" << text;
  }
  const std::string pick = c.pipeline->schedule;
  EXPECT_NE(text.find("schedule: auto picked " + c.schedule_ranking->pick()->name()),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("plan: schedule " + pick), std::string::npos) << text;
  // The run's predicted step and its stages' busy times are the pick's, not a second estimate
  // from another cost source.
  for (const planner::PlannedStage& st : c.schedule_ranking->pick()->planned.stages) {
    EXPECT_NE(text.find(fmt::format(" {:.4g} ", st.compute_ms)), std::string::npos) << text;
  }
  EXPECT_NE(text.find(fmt::format("predicted step time: {:.4g} ms per minibatch",
                                  c.schedule_ranking->pick()->step_ms)),
            std::string::npos)
      << text;
  // The pick's row comes first and carries the mark.
  const auto header_end = text.find('\n', text.find("stages x replicas"));
  const std::string first_row =
      text.substr(header_end + 1, text.find('\n', header_end + 1) - header_end - 1);
  EXPECT_EQ(first_row.rfind(c.schedule_ranking->pick()->name(), 0), 0u) << first_row;
  EXPECT_NE(first_row.find("<- pick"), std::string::npos) << first_row;
}

// cpu stages of one process share its cores: the ranking says when its profile was measured
// with another count of copies at once, or when there is no profile at all.
TEST(ScheduleAuto, NotesWhenTheProfileDoesNotMatchTheStagesSharingTheCores) {
  const fs::path dir =
      fs::temp_directory_path() / ("tandem_auto_notes_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto write_profile = [&](int concurrent) {
    const fs::path path = dir / fmt::format("p{}.json", concurrent);
    std::ofstream out(path);
    out << "{\"minibatch\": 16, \"concurrent\": " << concurrent << ", \"layers\": [";
    for (int l = 0; l < 8; ++l) {
      out << (l ? "," : "")
          << "{\"forward_ms\": 1, \"backward_ms\": 2, \"backward_weight_ms\": 1, "
             "\"activation_bytes\": 1024, \"parameter_bytes\": 4096, \"memory_bytes\": 1024}";
    }
    out << "]}";
    return path.string();
  };
  const auto notes = [&](const std::string& profile_line) {
    std::string pipeline = "  schedule: auto\n";
    pipeline += profile_line;
    pipeline += kFourStages;
    const train::Config c = train::parse_config(config(pipeline), "auto.yaml");
    std::ostringstream out;
    dry_run(c, out);
    return std::pair{c.schedule_ranking->notes, out.str()};
  };
  const auto [flops, flops_text] = notes("");
  ASSERT_EQ(flops.size(), 1u);
  EXPECT_NE(flops[0].find("FLOP counts"), std::string::npos) << flops[0];
  EXPECT_NE(flops[0].find("--concurrent 4"), std::string::npos) << flops[0];
  EXPECT_NE(flops_text.find("note: timed on the model's FLOP counts"), std::string::npos)
      << flops_text;
  const auto [one, one_text] = notes("  profile: " + write_profile(1) + "\n");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_NE(one[0].find("measured 1 copy at a time, but 4 cpu stages"), std::string::npos)
      << one[0];
  EXPECT_TRUE(notes("  profile: " + write_profile(4) + "\n").first.empty());
  fs::remove_all(dir);
}

TEST(ScheduleAuto, WithPartitionAutoThePlannerCutsEachSchedule) {
  const fs::path dir =
      fs::temp_directory_path() / ("tandem-sched-auto-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path examples = fs::path(TANDEM_SOURCE_DIR) / "configs/examples";
  std::ofstream(dir / "run.yaml")
      << "model: {name: gpt, layers: 4, d_model: 64, heads: 4, seq_len: 32, vocab: 32}\n"
         "data: {kind: markov-text, vocab: 16, samples: 512, seed: 1}\n"
         "train: {minibatch: 32, steps: 4, optimizer: {kind: adamw, lr: 1.0e-3}}\n"
         "pipeline:\n  schedule: auto\n  partition: auto\n"
      << "  profile: " << (examples / "profile-gpt-default.json").string() << "\n"
      << "  cluster: " << (examples / "cluster-cpu4.yaml").string() << "\n";
  const train::Config c = train::load_config(dir / "run.yaml");
  fs::remove_all(dir);
  ASSERT_TRUE(c.schedule_ranking.has_value());
  EXPECT_EQ(c.schedule_ranking->entries.size(), planner::ranking_candidates().size());
  EXPECT_EQ(c.pipeline->schedule, schedules::to_string(c.schedule_ranking->pick()->kind));
  EXPECT_EQ(c.pipeline->stages.size(), static_cast<size_t>(c.schedule_ranking->pick()->stages));
}

}  // namespace
}  // namespace tandem::apps
