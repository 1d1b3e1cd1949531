// Every kind of failure train::classify_failure tells apart (the embedding API's error codes
// are these kinds), each from the exception the library throws for it, with the place it names:
// a config key, a stage action's stage, replica and minibatch, the data source's minibatch, the
// step that diverged; a pipeline that went quiet (stalled), was stopped from outside (a lost
// rank), or broke its own rules (internal); a failed rendezvous; anything else is internal.
#include "train/failure_class.hpp"

#include <gtest/gtest.h>

#include <exception>
#include <stdexcept>
#include <string>

#include "actors/action_error.hpp"
#include "actors/data_source_error.hpp"
#include "actors/pipeline.hpp"
#include "schedules/schedule_error.hpp"
#include "train/checkpoint.hpp"
#include "train/diverged_error.hpp"
#include "train/job_error.hpp"
#include "transport/rendezvous.hpp"

namespace tandem::train {
namespace {

template <class E>
FailureClass of(const E& e) {
  return classify_failure(std::make_exception_ptr(e), nullptr);
}

using Kind = actors::PipelineError::Kind;

TEST(FailureClass, ConfigPlanCheckpointAndDataFailuresByTheirExceptions) {
  const FailureClass config = of(JobError("train.seed", "must be >= 0"));
  EXPECT_EQ(config.kind, FailureKind::config);
  EXPECT_EQ(config.where.key, "train.seed");
  EXPECT_EQ(of(std::invalid_argument("bad")).kind, FailureKind::config);
  EXPECT_EQ(of(schedules::ScheduleError("2bw needs slices")).kind, FailureKind::plan);
  EXPECT_EQ(of(CheckpointError("torn manifest")).kind, FailureKind::checkpoint);
  const FailureClass data = of(actors::PipelineError(
      Kind::failed, "data", std::make_exception_ptr(actors::DataSourceError("DataFn threw", 7))));
  EXPECT_EQ(data.kind, FailureKind::data);
  EXPECT_EQ(data.where.minibatch, 7);
}

TEST(FailureClass, ALayersExceptionNamesItsStageReplicaAndMinibatch) {
  const auto cause = std::make_exception_ptr(std::runtime_error("layer threw"));
  const FailureClass layer = of(actors::PipelineError(
      Kind::failed, "failed",
      std::make_exception_ptr(actors::ActionError("stage 1 F", 1, 0, 3, cause))));
  EXPECT_EQ(layer.kind, FailureKind::layer);
  EXPECT_EQ(layer.where.stage, 1);
  EXPECT_EQ(layer.where.replica, 0);
  EXPECT_EQ(layer.where.minibatch, 3);
}

TEST(FailureClass, QuietStoppedAndBrokenRunsAreStalledLostRankAndInternal) {
  EXPECT_EQ(of(actors::PipelineError(Kind::quiet, "no stage can go on")).kind,
            FailureKind::stalled);
  EXPECT_EQ(of(actors::PipelineError(Kind::stopped, "lost rank 1")).kind, FailureKind::lost_rank);
  EXPECT_EQ(of(actors::PipelineError(Kind::internal, "outputs miss a row")).kind,
            FailureKind::internal);
  EXPECT_EQ(of(transport::RendezvousError("rank 1 went silent")).kind, FailureKind::lost_rank);
  const FailureClass diverged = of(DivergedError("loss is NaN", 12));
  EXPECT_EQ(diverged.kind, FailureKind::diverged);
  EXPECT_EQ(diverged.where.minibatch, 12);
}

TEST(FailureClass, WhatNoKindNamesIsInternal) {
  EXPECT_EQ(of(std::logic_error("a broken invariant")).kind, FailureKind::internal);
  EXPECT_EQ(of(std::runtime_error("something")).kind, FailureKind::internal);
  EXPECT_EQ(classify_failure(std::make_exception_ptr(42), nullptr).kind, FailureKind::internal);
  EXPECT_EQ(of(actors::PipelineError(Kind::failed, "no cause")).kind, FailureKind::internal);
}

}  // namespace
}  // namespace tandem::train
