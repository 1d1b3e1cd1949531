// `tandem train --dry-run`: validates, prints the plan and the simulator's prediction, trains
// nothing.
#include "apps/dry_run.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "apps/commands.hpp"
#include "train/config.hpp"

namespace tandem::apps {
namespace {

// A GPT of 8 layers (embedding, 5 blocks, norm, head) in four stages; steps far beyond what
// could be trained within the test's time, so a test that returns trained nothing.
std::string config(const std::string& schedule, const std::string& extra = "") {
  return "model: {name: gpt, layers: 5, d_model: 32, heads: 4, seq_len: 16, vocab: 32}\n"
         "data: {kind: markov-text, samples: 256}\n"
         "train: {minibatch: 16, steps: 1000000000, optimizer: {kind: adamw, lr: 0.001}}\n"
         "pipeline:\n  schedule: " +
         schedule + "\n" + extra +
         "  stages:\n"
         "    - {layers: \"0-1\"}\n    - {layers: \"2-3\"}\n    - {layers: \"4-5\"}\n"
         "    - {layers: \"6-7\"}\n";
}

TEST(DryRun, PrintsThePlanAndThePrediction) {
  const train::Config c = train::parse_config(config("1f1b", "  slices: 8\n"), "dry.yaml");
  std::ostringstream out;
  dry_run(c, out);
  const std::string text = out.str();
  for (const char* words : {"dry.yaml is valid; nothing was trained", "schedule 1f1b, 8 slices",
                            "4 stages", "predicted step time", "memory/device", "6-7"}) {
    EXPECT_NE(text.find(words), std::string::npos) << words << " in\n" << text;
  }
  const DryRunPrediction p = predict(c);
  EXPECT_GT(p.step_ms, 0);
  ASSERT_EQ(p.memory_bytes.size(), 4u);
  for (const double m : p.memory_bytes) EXPECT_GT(m, 0);
  // A pipeline of 4 stages with 8 slices idles while it fills and drains.
  EXPECT_GT(p.bubble, 0);
  // More slices shorten the fill and drain: the simulator sees it.
  const DryRunPrediction more = predict(train::parse_config(config("1f1b", "  slices: 16\n"), "d"));
  EXPECT_LT(more.bubble, p.bubble);
}

TEST(DryRun, EverySchedulePredicts) {
  for (const char* schedule : {"gpipe", "1f1b", "pipedream", "pipedream-vsync", "zb-h1"}) {
    const DryRunPrediction p = predict(train::parse_config(config(schedule), "d"));
    EXPECT_GT(p.step_ms, 0) << schedule;
  }
}

// A chunked plan's stages hold the runtime's even split of the model, whatever the config's
// layer ranges say: the prediction costs those virtual stages (as `schedule: auto` and `tandem
// bench` do) and the table shows each stage's chunks.
TEST(DryRun, ChunkedSchedulesArePredictedOnTheirVirtualStages) {
  const auto on_sim = [](const std::string& schedule) {
    std::string text = config(schedule, "  slices: 4\n");
    for (std::size_t at = 0; (at = text.find("\"}", at)) != std::string::npos; at += 2) {
      text.replace(at, 2, "\", device: sim}");
    }
    return train::parse_config(text, "d.yaml");
  };
  const train::Config ranked = on_sim("auto");
  ASSERT_TRUE(ranked.schedule_ranking.has_value());
  for (const char* schedule : {"interleaved", "zb-v", "1f1b"}) {
    const planner::RankedSchedule* entry = nullptr;
    for (const planner::RankedSchedule& e : ranked.schedule_ranking->entries) {
      if (e.name() == schedule) entry = &e;
    }
    ASSERT_NE(entry, nullptr) << schedule;
    ASSERT_TRUE(entry->dropped.empty()) << schedule << ": " << entry->dropped;
    EXPECT_NEAR(predict(on_sim(schedule)).step_ms, entry->step_ms, 1e-9 * entry->step_ms)
        << schedule;
  }
  const DryRunPrediction v = predict(on_sim("zb-v"));
  ASSERT_EQ(v.stage_layers.size(), 4u);
  EXPECT_EQ(v.stage_layers[0], "0,7");  // 8 layers in 8 chunks, placed as a V
  EXPECT_EQ(v.stage_layers[3], "3,4");
}

TEST(DryRun, TrainCommandFlagTrainsNothing) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("tandem_dry_run_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream f(path);
    f << config("gpipe", "  slices: 4\n");
  }
  CLI::App app{"tandem"};
  add_train_command(app);
  testing::internal::CaptureStdout();
  app.parse("train " + path.string() + " --dry-run", false);
  const std::string text = testing::internal::GetCapturedStdout();
  std::filesystem::remove(path);
  EXPECT_NE(text.find("nothing was trained"), std::string::npos) << text;
  EXPECT_NE(text.find("predicted step time"), std::string::npos) << text;
}

}  // namespace
}  // namespace tandem::apps
