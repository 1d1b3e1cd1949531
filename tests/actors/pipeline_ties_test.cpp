// Tied parameters across stages (a GPT whose output head reuses its token embedding): each stage
// holding a copy sums the copies' gradients with the others at every round's SYNC, so a flush
// pipeline still ends with single-device training's weights, and the copies stay bit-identical
// after every update, under PipeDream too (both copies advance together, one version each round).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "pipeline_harness.hpp"
#include "runtime/scheduler.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::Op;
using schedules::ScheduleKind;
using schedules::ScheduleParams;

models::Model tied_gpt() {
  models::ModelSpec s = models::gpt_spec(5, 16, 2, 6, 11);
  s.dropout = 0.1f;
  s.tie_embeddings = true;
  return models::Model::build(s);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// What each replica's STEP published (its copies of the tie) and applied, and what each SYNC
// started from.
struct TieRecorder {
  std::vector<std::string> names;  // the copies of the model's one tie
  std::mutex mu;
  // (round, stage, replica, name) -> the copy after the round's STEP
  std::map<std::tuple<std::int64_t, int, int, std::string>, Tensor> weights;
  // (round, stage, replica, name) -> the gradient the round's STEP applied / SYNC started from
  std::map<std::tuple<std::int64_t, int, int, std::string>, Tensor> applied, before_sync;

  StageObserver observer() {
    return [this](const StageEvent& e) {
      std::lock_guard lock(mu);
      for (const std::string& n : names) {
        const auto key = std::make_tuple(e.action.minibatch, e.stage, e.replica, n);
        if (e.action.op == Op::STEP && e.weights->contains(n)) {
          weights[key] = e.weights->at(n).clone();
          applied[key] = e.grads->at(n).clone();
        } else if (e.action.op == Op::SYNC && e.grads->contains(n)) {
          before_sync[key] = e.grads->at(n).clone();
        }
      }
    };
  }

  // Every copy, on every stage and replica, equal bit for bit after each round.
  void expect_copies_identical(std::int64_t rounds) const {
    for (std::int64_t k = 0; k < rounds; ++k) {
      const Tensor* first = nullptr;
      int copies = 0;
      for (const auto& [key, t] : weights) {
        if (std::get<0>(key) != k) continue;
        ++copies;
        if (first == nullptr) first = &t;
        EXPECT_TRUE(same_bits(*first, t))
            << "round " << k << ": stage " << std::get<1>(key) << " replica " << std::get<2>(key)
            << " copy " << std::get<3>(key) << " differs";
      }
      EXPECT_GE(copies, 2) << "round " << k;
    }
  }
};

class TiedFlush : public ::testing::TestWithParam<FlushCase> {};

TEST_P(TiedFlush, EqualsOneDeviceAndKeepsTheCopiesBitIdentical) {
  const FlushCase& c = GetParam();
  const models::Model model = tied_gpt();
  constexpr std::int64_t kMinibatches = 3;
  const std::uint64_t seed = 11;
  auto data = [&](std::int64_t b) { return make_minibatch(model, 8, b); };
  TieRecorder rec;
  for (const models::TieCopy& copy : model.ties().at(0).copies) rec.names.push_back(copy.name);
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, flush_params(c, 8, kMinibatches));
  spec.optimizer = sgd_momentum();
  spec.seed = seed;
  spec.data = data;
  spec.observer = rec.observer();
  Pipeline pipeline(std::move(spec), make_scheduler(true));
  pipeline.run();

  const models::ParamSet expected =
      reference_training(model, model.init_params(seed), sgd_momentum(), seed, kMinibatches, data);
  for (int r = 0; r < *std::max_element(c.replicas.begin(), c.replicas.end()); ++r) {
    EXPECT_LE(max_relative_error(pipeline.params(r), expected), 1e-6) << "replica " << r;
  }
  rec.expect_copies_identical(kMinibatches);
}

std::vector<FlushCase> tie_cases() {
  return {
      {"onef1b_4stages", ScheduleKind::one_f_one_b, {1, 1, 1, 1}, 4},
      {"gpipe_4stages", ScheduleKind::gpipe, {1, 1, 1, 1}, 4},
      {"zb_h1_4stages", ScheduleKind::zb_h1, {1, 1, 1, 1}, 4},
      {"interleaved", ScheduleKind::interleaved, {1, 1}, 4, 2},
      // V order: the first and the last virtual stage share device 0, so the tie is local.
      {"zb_v_local", ScheduleKind::zb_v, {1, 1}, 4, 2},
      {"onef1b_2111", ScheduleKind::one_f_one_b, {2, 1, 1, 1}, 4},
      {"gpipe_1112", ScheduleKind::gpipe, {1, 1, 1, 2}, 4},
      {"one_stage", ScheduleKind::gpipe, {1}, 2},
      {"umpipe",
       ScheduleKind::umpipe,
       {1, 1, 1},
       2,
       1,
       false,
       {{1, 3, 4}, {4, 4}, {2, 6}},
       {{3, 5}, {8}, {5, 3}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Schedules, TiedFlush, ::testing::ValuesIn(tie_cases()),
                         [](const auto& test) { return test.param.name; });

// PipeDream: each stage steps after every backward; a tied stage's SYNC of round k waits for the
// other copies' gradients of minibatch k, so version k + 1 of every copy is the same tensor. The
// update a round applies is the sum of what each copy's stage computed (at that stage's own
// version of minibatch k, docs/schedules.md).
TEST(TiedPipeDream, BothCopiesAdvanceTogether) {
  for (const ScheduleKind kind : {ScheduleKind::pipedream, ScheduleKind::pipedream_vsync}) {
    const models::Model model = tied_gpt();
    constexpr std::int64_t kMinibatches = 8;
    ScheduleParams p;
    p.kind = kind;
    p.stages = 4;
    p.minibatch_size = 4;
    p.minibatches = kMinibatches;
    TieRecorder rec;
    for (const models::TieCopy& copy : model.ties().at(0).copies) rec.names.push_back(copy.name);
    PipelineSpec spec;
    spec.model = &model;
    spec.plan = even_plan(model, p);
    spec.optimizer = sgd_momentum();
    spec.seed = 3;
    spec.data = [&](std::int64_t b) { return make_minibatch(model, 4, b); };
    spec.observer = rec.observer();
    Pipeline pipeline(std::move(spec), make_scheduler(true));
    pipeline.run();
    rec.expect_copies_identical(kMinibatches);
    // Round k applies, on each copy, the sum of both stages' own gradients of minibatch k.
    const std::string& lead = rec.names[0];
    const std::string& follow = rec.names[1];
    for (std::int64_t k = 0; k < kMinibatches; ++k) {
      const auto g0 = rec.before_sync.at({k, 0, 0, lead}).to_float_vector();
      const auto g3 = rec.before_sync.at({k, 3, 0, follow}).to_float_vector();
      const auto s0 = rec.applied.at({k, 0, 0, lead}).to_float_vector();
      const auto s3 = rec.applied.at({k, 3, 0, follow}).to_float_vector();
      ASSERT_EQ(g0.size(), s0.size());
      for (std::size_t i = 0; i < g0.size(); ++i) {
        ASSERT_EQ(s0[i], g0[i] + g3[i]) << "round " << k << " element " << i;
        ASSERT_EQ(s3[i], s0[i]) << "round " << k << " element " << i;
      }
    }
  }
}

TEST(TiedPipeDream, AReplicatedTiedStageIsRefused) {
  const models::Model model = tied_gpt();
  ScheduleParams p;
  p.kind = ScheduleKind::pipedream;
  p.stages = 2;
  p.replicas = {2, 1};
  p.minibatch_size = 4;
  p.minibatches = 4;
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.optimizer = sgd_momentum();
  spec.data = [&](std::int64_t b) { return make_minibatch(model, 4, b); };
  try {
    Pipeline pipeline(std::move(spec), make_scheduler(false));
    FAIL() << "a replicated tied stage under PipeDream was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("PipeDream ties only unreplicated stages"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::actors
