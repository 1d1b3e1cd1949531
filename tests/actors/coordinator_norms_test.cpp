// The coordinator's gradient-norm reports (GradNormReport, a message that crosses processes):
// a minibatch completes once its loss and its norm are both in, per-stage norms add in stage
// order, and reports that cannot be right stop the run naming what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "actors/coordinator.hpp"
#include "actors/messages.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/manual_scheduler.hpp"

namespace tandem::actors {
namespace {

struct Harness {
  ActorSystem system{make_manual()};
  std::vector<std::string> errors;
  std::vector<std::pair<std::int64_t, MinibatchLoss>> done;
  Coordinator* c = nullptr;

  explicit Harness(NormReports norms) {
    system.set_error_handler([this](const ActorError& e) { errors.push_back(e.what); });
    c = system.spawn<Coordinator>(
        "coordinator", 1,
        [this](std::int64_t b, const MinibatchLoss& l) { done.emplace_back(b, l); }, nullptr,
        norms);
  }
  void loss(std::int64_t b, std::int32_t rows, std::uint32_t total) {
    Tag tag;
    tag.minibatch = b;
    (void)system.send(c, LossReport{1.5 * rows, rows, 0, total}, {}, tag);
    system.wait_idle();
  }
  void norm(std::int64_t b, int stage, double squares) {
    Tag tag;
    tag.minibatch = b;
    (void)system.send(c, GradNormReport{squares, stage}, {}, tag);
    system.wait_idle();
  }
};

TEST(CoordinatorNorms, AMinibatchWaitsForItsNormWhicheverComesFirst) {
  Harness h({NormReports::Kind::global, 3});
  h.loss(0, 8, 8);
  EXPECT_TRUE(h.done.empty());  // its norm is missing
  h.norm(0, -1, 9.0);
  ASSERT_EQ(h.done.size(), 1u);
  EXPECT_DOUBLE_EQ(h.done[0].second.grad_norm, 3.0);
  h.norm(1, -1, 4.0);  // the norm first
  EXPECT_EQ(h.done.size(), 1u);
  h.loss(1, 4, 8);
  h.loss(1, 4, 8);
  ASSERT_EQ(h.done.size(), 2u);
  EXPECT_DOUBLE_EQ(h.done[1].second.grad_norm, 2.0);
  EXPECT_TRUE(h.errors.empty());
}

TEST(CoordinatorNorms, PerStageSquaresAddInStageOrder) {
  Harness h({NormReports::Kind::per_stage, 3});
  h.loss(0, 8, 8);
  h.norm(0, 2, 1.0);
  h.norm(0, 0, 4.0);
  EXPECT_TRUE(h.done.empty());
  h.norm(0, 1, 4.0);
  ASSERT_EQ(h.done.size(), 1u);
  EXPECT_DOUBLE_EQ(h.done[0].second.grad_norm, 3.0);
}

TEST(CoordinatorNorms, ADivergedNormIsReportedAsNaN) {
  Harness h({NormReports::Kind::global, 1});
  h.loss(0, 8, 8);
  h.norm(0, -1, std::numeric_limits<double>::quiet_NaN());
  ASSERT_EQ(h.done.size(), 1u);
  EXPECT_TRUE(std::isnan(h.done[0].second.grad_norm));
  EXPECT_TRUE(h.errors.empty());
}

TEST(CoordinatorNorms, HostileReportsAreRefused) {
  const auto refused = [](NormReports norms, std::int64_t b, int stage, double squares,
                          const std::string& why, bool twice = false) {
    Harness h(norms);
    if (twice) h.norm(b, stage, squares);
    h.norm(b, stage, squares);
    ASSERT_EQ(h.errors.size(), 1u) << why;
    EXPECT_NE(h.errors[0].find(why), std::string::npos) << h.errors[0];
  };
  const NormReports global{NormReports::Kind::global, 2};
  const NormReports stages{NormReports::Kind::per_stage, 2};
  refused({}, 0, -1, 1.0, "none expected");
  refused(global, 0, 0, 1.0, "no such round or stage");  // a stage's where the model's is due
  refused(stages, 0, -1, 1.0, "no such round or stage");
  refused(stages, 0, 2, 1.0, "no such round or stage");
  refused(stages, 0, std::numeric_limits<std::int32_t>::max(), 1.0, "no such round or stage");
  refused(global, -1, -1, 1.0, "no such round or stage");
  refused(global, 0, -1, -1.0, "negative");
  refused(global, 0, -1, -std::numeric_limits<double>::infinity(), "negative");
  refused(global, 3, -1, 1.0, "twice", true);
  refused(stages, 3, 1, 1.0, "twice", true);
}

}  // namespace
}  // namespace tandem::actors
