// The zoo's sequence models (gnmt, s2vt) train through a 4-stage PipeDream pipeline: no flushes,
// each stage updating after every minibatch with its forward's weights stashed for the backward,
// the attention's skip edge (gnmt) and the packed mixed-dtype input (s2vt) crossing stages.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>

#include "train/config.hpp"
#include "train/job_plan.hpp"
#include "train/session.hpp"

namespace tandem::train {
namespace {

// The shipped config with its 1F1B pipeline (4 slices) turned into PipeDream's (one slice).
Config pipedream_config(const char* name) {
  const auto path = std::filesystem::path(TANDEM_SOURCE_DIR) / "configs" / name;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const std::string from = "  schedule: 1f1b\n  slices: 4\n";
  const std::size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos) << name;
  if (at != std::string::npos) yaml.replace(at, from.size(), "  schedule: pipedream\n");
  // Stale weights (a minibatch's forward runs up to 3 updates behind on stage 0) want a smaller
  // step than 1F1B's: at 1e-2 the 8-layer GNMT's loss stalls near 2 nats. (S2VT's config
  // already steps at 3e-3.)
  const std::string lr = "lr: 1.0e-2";
  const std::size_t lr_at = yaml.find(lr);
  if (lr_at != std::string::npos) yaml.replace(lr_at, lr.size(), "lr: 3.0e-3");
  EXPECT_NE(yaml.find("lr: 3.0e-3"), std::string::npos) << name;
  return parse_config(yaml, path.string());
}

double mean(const std::vector<float>& v, std::size_t begin, std::size_t end) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(begin),
                         v.begin() + static_cast<std::ptrdiff_t>(end), 0.0) /
         static_cast<double>(end - begin);
}

void expect_falling_loss(const char* name) {
  SCOPED_TRACE(name);
  const Config config = pipedream_config(name);
  ASSERT_TRUE(is_pipeline(config));
  ASSERT_EQ(config.pipeline->stages.size(), 4u);
  Session trainer(config, SessionOptions{.steps = 300});
  const TrainSummary s = trainer.run();
  ASSERT_EQ(s.losses.size(), 300u);
  for (const float l : s.losses) ASSERT_TRUE(std::isfinite(l)) << l;
  // The last 20 minibatches' mean loss well under the first 20's.
  EXPECT_LT(mean(s.losses, 280, 300), 0.7 * mean(s.losses, 0, 20));
}

TEST(SequenceZooPipeDream, GnmtLossFallsOnFourStages) {
  expect_falling_loss("gnmt-small.yaml");
}

TEST(SequenceZooPipeDream, S2vtLossFallsOnFourStages) {
  expect_falling_loss("s2vt-small.yaml");
}

}  // namespace
}  // namespace tandem::train
