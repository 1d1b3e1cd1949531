// PipeDream's weight stashing, vertical sync and 2BW: every (minibatch, stage, replica) runs
// with the version the schedule's formula gives, forward and backward alike, and the gradient
// it applies is the single-device gradient taken with those versions on every stage.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "pipeline_harness.hpp"
#include "runtime/scheduler.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::Op;
using schedules::ScheduleKind;
using schedules::ScheduleParams;

struct Recorder {
  std::mutex mu;
  // (stage, minibatch) -> version used by F and by B.
  std::map<std::pair<int, std::int64_t>, std::int64_t> f_version, b_version;
  // (stage, version) -> the weights of that version (clones).
  std::map<std::pair<int, std::int64_t>, models::ParamSet> versions;
  // (stage, replica, round) -> gradients applied by STEP.
  std::map<std::tuple<int, int, std::int64_t>, models::ParamSet> steps;

  StageObserver observer() {
    return [this](const StageEvent& e) {
      std::lock_guard lock(mu);
      const auto& a = e.action;
      if (a.op == Op::F) {
        f_version[{e.stage, a.minibatch}] = e.version;
        if (e.replica == 0) versions.try_emplace({e.stage, e.version}, e.weights->clone());
      } else if (a.op == Op::B) {
        b_version[{e.stage, a.minibatch}] = e.version;
      } else if (a.op == Op::STEP) {
        steps[{e.stage, e.replica, a.minibatch}] = e.grads->clone();
        if (e.replica == 0) versions.try_emplace({e.stage, e.version}, e.weights->clone());
      }
    };
  }
};

struct AsyncCase {
  std::string name;
  ScheduleKind kind;
  std::vector<int> replicas;
  int slices = 1;
  std::int64_t minibatches = 12;  // 2BW: batches
  bool graph = false;             // tiny_graph: its skip edges carry tensors of version(b, s)
};

std::ostream& operator<<(std::ostream& os, const AsyncCase& c) {
  return os << c.name;
}

class Asynchronous : public ::testing::TestWithParam<AsyncCase> {};

// Runs `minibatches` of the setup and checks versions and gradients; returns the worst
// relative gradient error over all steps.
double run_and_check(const AsyncCase& c, bool stashing, bool check_versions) {
  const models::Model model = c.graph ? tiny_graph() : tiny_mlp();
  const std::uint64_t seed = 5;
  const std::int64_t samples = 4;
  ScheduleParams p;
  p.kind = c.kind;
  p.stages = static_cast<int>(c.replicas.size());
  p.replicas = c.replicas;
  p.slices = c.slices;
  p.minibatch_size = samples;
  p.minibatches = c.minibatches;
  auto data = [&](std::int64_t b) { return make_minibatch(model, samples, b); };
  Recorder rec;
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.optimizer = sgd_momentum();
  spec.optimizer.lr = 0.2;  // versions must differ visibly
  spec.seed = seed;
  spec.data = data;
  spec.weight_stashing = stashing;
  spec.observer = rec.observer();
  Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
  pipeline.run();
  const ScheduleParams& sp = p;

  if (check_versions) {
    for (const auto& [key, v] : rec.f_version) {
      const auto [stage, b] = key;
      EXPECT_EQ(v, schedules::weight_version(sp, stage, b)) << "F stage " << stage << " mb " << b;
      EXPECT_EQ(rec.b_version.at(key), v) << "B stage " << stage << " mb " << b;
    }
  }
  // The gradient applied by each STEP, against single-device gradients at the versions used.
  double worst = 0;
  const int P = sp.stages;
  for (const auto& [key, grads] : rec.steps) {
    const auto [stage, replica, round] = key;
    const int r = sp.replicas_of(stage);
    std::vector<std::int64_t> mbs;
    if (c.kind == ScheduleKind::pipedream_2bw) {
      mbs = {round};
    } else {
      for (int j = 0; j < r; ++j) {
        if (round * r + j < p.minibatches) mbs.push_back(round * r + j);
      }
    }
    models::ParamSet expected;
    for (std::int64_t b : mbs) {
      models::ParamSet whole;
      for (int s = 0; s < P; ++s) {
        whole.merge(rec.versions.at({s, schedules::weight_version(sp, s, b)}));
      }
      models::ParamSet g = reference_grads(model, whole, data(b), seed, b);
      models::ParamSet mine = g.subset(grads.names());
      if (expected.empty()) {
        expected = mine;
      } else {
        expected.add_(mine);
      }
    }
    expected.scale_(1.0f / static_cast<float>(mbs.size()));
    worst = std::max(worst, max_relative_error(grads, expected));
  }
  return worst;
}

TEST_P(Asynchronous, VersionsFollowTheFormulaAndGradientsUseThem) {
  EXPECT_LE(run_and_check(GetParam(), true, true), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, Asynchronous,
    ::testing::Values(
        AsyncCase{"pipedream_straight", ScheduleKind::pipedream, {1, 1, 1, 1}},
        AsyncCase{"pipedream_211", ScheduleKind::pipedream, {2, 1, 1}},
        AsyncCase{"pipedream_121", ScheduleKind::pipedream, {1, 2, 1}},
        AsyncCase{"vertical_sync", ScheduleKind::pipedream_vsync, {1, 1, 1, 1}},
        // A last SYNC round that only replica 0 has a minibatch for.
        AsyncCase{"pipedream_211_partial_round", ScheduleKind::pipedream, {2, 1, 1}, 1, 9},
        AsyncCase{"two_bw", ScheduleKind::pipedream_2bw, {1, 1, 1}, 4, 4},
        // Edges over two cuts: the consumer of a skip gets the tensor its
        // producer computed with that stage's version for the minibatch.
        AsyncCase{"graph_pipedream_straight", ScheduleKind::pipedream, {1, 1, 1, 1}, 1, 12, true},
        AsyncCase{"graph_pipedream_2111", ScheduleKind::pipedream, {2, 1, 1, 1}, 1, 12, true},
        AsyncCase{"graph_vertical_sync", ScheduleKind::pipedream_vsync, {1, 1, 1, 1}, 1, 12, true},
        AsyncCase{"graph_two_bw", ScheduleKind::pipedream_2bw, {1, 1, 1, 1}, 4, 4, true}),
    [](const auto& test) { return test.param.name; });

TEST(Asynchronous, WithoutStashingTheGradientsAreWrong) {
  // The debug switch makes backward use the latest weights: the contract must then fail.
  const AsyncCase c{"pipedream_straight", ScheduleKind::pipedream, {1, 1, 1, 1}};
  EXPECT_GT(run_and_check(c, false, false), 1e-3);
}

}  // namespace
}  // namespace tandem::actors
