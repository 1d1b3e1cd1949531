// Random plans never deadlock, corrupted orders never start, variable shapes flow through,
// memory stays within the schedule's bound, errors stop the run with their place named, and
// the sim device completes asynchronously with exactly its configured durations.
#include <gtest/gtest.h>

#include <random>

#include "pipeline_harness.hpp"
#include "runtime/scheduler.hpp"
#include "schedules/pipeline_rules.hpp"
#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::actors {
namespace {

using namespace testing;
using schedules::ScheduleKind;
using schedules::ScheduleParams;

// A random plan the schedule library accepts.
ScheduleParams random_params(std::mt19937& rng) {
  const ScheduleKind kinds[] = {
      ScheduleKind::naive,       ScheduleKind::gpipe,           ScheduleKind::one_f_one_b,
      ScheduleKind::pipedream,   ScheduleKind::pipedream_vsync, ScheduleKind::pipedream_2bw,
      ScheduleKind::interleaved, ScheduleKind::zb_h1,           ScheduleKind::umpipe};
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (;;) {
    ScheduleParams p;
    p.kind = kinds[pick(0, 8)];
    p.stages = pick(1, 4);
    const bool replicable = p.kind == ScheduleKind::naive || p.kind == ScheduleKind::gpipe ||
                            p.kind == ScheduleKind::one_f_one_b ||
                            p.kind == ScheduleKind::pipedream;
    if (replicable) {
      for (int s = 0; s < p.stages; ++s) p.replicas.push_back(pick(1, 2));
    }
    const bool async = p.kind == ScheduleKind::pipedream || p.kind == ScheduleKind::pipedream_vsync;
    p.slices = async ? 1 : pick(1, 6);
    if (p.kind == ScheduleKind::interleaved) {
      p.chunks = 2;
      p.slices = p.stages * pick(1, 2);
      if (p.stages * p.chunks > 8) continue;
    }
    if (p.kind == ScheduleKind::pipedream_2bw) p.slices = std::max(p.slices, p.stages);
    p.minibatch_size = pick(std::max(p.slices, 1), 8);
    p.rematerialize = p.kind == ScheduleKind::gpipe && pick(0, 1) == 1;
    p.minibatches = async ? pick(1, 7) : pick(1, 3);
    if (p.kind == ScheduleKind::umpipe) {
      auto composition = [&] {
        std::vector<std::int64_t> c;
        std::int64_t left = p.minibatch_size;
        while (left > 0) {
          const std::int64_t n = std::min<std::int64_t>(left, pick(1, 3));
          c.push_back(n);
          left -= n;
        }
        return c;
      };
      for (int s = 0; s < p.stages; ++s) {
        p.forward_slices.push_back(composition());
        p.backward_slices.push_back(composition());
      }
    }
    try {
      schedules::Schedule check(p);
      return p;
    } catch (const schedules::ScheduleError&) {
    }
  }
}

TEST(Pipeline, TwoHundredRandomPlansFinishOnBothSchedulers) {
  std::mt19937 rng(20261122);
  const models::Model model = tiny_mlp();
  for (int i = 0; i < 200; ++i) {
    const ScheduleParams p = random_params(rng);
    for (bool threads : {false, true}) {
      PipelineSpec spec;
      spec.model = &model;
      spec.plan = even_plan(model, p);
      spec.seed = 3;
      spec.data = [&](std::int64_t b) { return make_minibatch(model, p.minibatch_size, b); };
      Pipeline pipeline(std::move(spec), make_scheduler(threads));
      PipelineResult r;
      ASSERT_NO_THROW(r = pipeline.run())
          << "plan " << i << ": " << schedules::to_string(p.kind) << " p=" << p.stages
          << " m=" << p.slices << (threads ? " threads" : " manual");
      EXPECT_EQ(r.losses.size(), static_cast<std::size_t>(p.minibatches)) << "plan " << i;
    }
  }
}

TEST(Pipeline, ACorruptedOrderIsRejectedBeforeTheRun) {
  const models::Model model = tiny_mlp();
  ScheduleParams p;
  p.kind = ScheduleKind::one_f_one_b;
  p.stages = 2;
  p.slices = 2;
  p.minibatch_size = 4;
  schedules::ActionList list = schedules::Schedule(p).materialize();
  // The last stage runs B(0) before F(0): it would wait forever.
  auto& d1 = list.devices[1];
  std::swap(d1[0], d1[1]);
  p.kind = ScheduleKind::custom;
  list.params.kind = ScheduleKind::custom;
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, [&] {
    ScheduleParams q = p;
    q.kind = ScheduleKind::gpipe;
    return q;
  }());
  spec.plan.schedule.kind = ScheduleKind::custom;
  spec.order = list;
  spec.data = [&](std::int64_t b) { return make_minibatch(model, 4, b); };
  EXPECT_THROW(Pipeline(std::move(spec), make_manual()), schedules::ScheduleError);
}

TEST(Pipeline, VariableSequenceLengthsFlowThroughEverySchedule) {
  const models::Model model = tiny_gpt(0.0f);
  struct Kind {
    ScheduleKind kind;
    int stages, slices, chunks;
  };
  for (const Kind k :
       {Kind{ScheduleKind::gpipe, 2, 2, 1}, Kind{ScheduleKind::one_f_one_b, 4, 2, 1},
        Kind{ScheduleKind::zb_h1, 3, 2, 1}, Kind{ScheduleKind::naive, 2, 2, 1},
        Kind{ScheduleKind::interleaved, 2, 2, 2}, Kind{ScheduleKind::umpipe, 3, 2, 1},
        Kind{ScheduleKind::pipedream_2bw, 2, 2, 1}, Kind{ScheduleKind::pipedream, 3, 1, 1}}) {
    ScheduleParams p;
    p.kind = k.kind;
    p.stages = k.stages;
    p.slices = k.slices;
    p.chunks = k.chunks;
    p.minibatch_size = 4;
    p.minibatches = 3;
    const bool whole = k.kind == ScheduleKind::pipedream;
    // Flush schedules equal single-device training; the asynchronous ones only have to run.
    const bool flush = !whole && k.kind != ScheduleKind::pipedream_2bw;
    // Flush schedules: two slices of different lengths in each minibatch; PipeDream runs
    // whole minibatches, whose lengths differ from one to the next.
    auto data = [&](std::int64_t b) {
      return whole ? make_minibatch(model, 4, b, {b % 2 == 0 ? 6 : 3})
                   : make_minibatch(model, 4, b, {6, 3 + b % 2});
    };
    PipelineSpec spec;
    spec.model = &model;
    spec.plan = even_plan(model, p);
    spec.optimizer = sgd_momentum();
    spec.seed = 1;
    spec.data = data;
    Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
    ASSERT_NO_THROW(pipeline.run()) << schedules::to_string(k.kind);
    if (flush) {
      const models::ParamSet expected =
          reference_training(model, model.init_params(1), sgd_momentum(), 1, 3, data);
      EXPECT_LE(max_relative_error(pipeline.params(), expected), 1e-5)
          << schedules::to_string(k.kind);
    }
  }
}

TEST(Pipeline, MemoryStaysWithinTheScheduleBoundOverALongRun) {
  const models::Model model = tiny_mlp();
  for (const std::vector<int>& replicas :
       {std::vector<int>{1, 1, 1, 1}, std::vector<int>{2, 1, 1}, std::vector<int>{1, 2, 1}}) {
    ScheduleParams p;
    p.kind = ScheduleKind::pipedream;
    p.stages = static_cast<int>(replicas.size());
    p.replicas = replicas;
    p.minibatch_size = 2;
    p.minibatches = 200;
    PipelineSpec spec;
    spec.model = &model;
    spec.plan = even_plan(model, p);
    spec.data = [&](std::int64_t b) { return make_minibatch(model, 2, b); };
    Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
    const PipelineResult r = pipeline.run();
    for (const StageStats& s : r.stages) {
      EXPECT_LE(s.peak_versions, static_cast<std::size_t>(schedules::versions_kept(p, s.stage)))
          << "stage " << s.stage << " replica " << s.replica;
      EXPECT_LE(s.peak_activations, static_cast<std::size_t>(schedules::warmup(p, s.stage) + 1))
          << "stage " << s.stage << " replica " << s.replica;
      // What waits in a stage's inbox is bounded by what the loader admitted: an activation
      // (or input and target) and a gradient per admitted minibatch at most.
      EXPECT_LE(s.peak_received, static_cast<std::size_t>(3 * schedules::admission_window(p)))
          << "stage " << s.stage << " replica " << s.replica;
    }
    EXPECT_LE(r.loader_peak_in_flight, schedules::admission_window(p));
  }
}

TEST(Pipeline, AnErrorInALayerStopsTheRunNamingStageReplicaAndAction) {
  const models::Model model = tiny_mlp();
  for (bool threads : {false, true}) {
    ScheduleParams p;
    p.kind = ScheduleKind::one_f_one_b;
    p.stages = 3;
    p.replicas = {1, 2, 1};
    p.slices = 4;
    p.minibatch_size = 8;
    p.minibatches = 4;
    PipelineSpec spec;
    spec.model = &model;
    spec.plan = even_plan(model, p);
    spec.data = [&](std::int64_t b) {
      MinibatchData d = make_minibatch(model, 8, b);
      // Minibatch 2's targets name a class the model does not have: the last stage's loss throws.
      if (b == 2) d.pieces[0].targets = Tensor::full({8}, 99.0f, DType::i32);
      return d;
    };
    Pipeline pipeline(std::move(spec), make_scheduler(threads));
    try {
      pipeline.run();
      ADD_FAILURE() << "the run should have failed";
    } catch (const PipelineError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("stage 2 replica 0"), std::string::npos) << what;
      EXPECT_NE(what.find("F(mb 2"), std::string::npos) << what;
    }
  }
}

TEST(Pipeline, FailFromOutsideStopsTheRunWithItsReason) {
  const models::Model model = tiny_mlp();
  ScheduleParams p;
  p.kind = ScheduleKind::one_f_one_b;
  p.stages = 2;
  p.slices = 2;
  p.minibatch_size = 8;
  p.minibatches = 1000;
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  Pipeline* self = nullptr;
  // What a lost peer process looks like to the process that stays: the run fails mid-way.
  spec.on_minibatch = [&](std::int64_t b, const MinibatchReport&) {
    if (b == 3) self->stop_with_error("rank 1 (10.0.0.2) lost: no heartbeat for 3.0 s");
  };
  spec.data = [&](std::int64_t b) { return make_minibatch(model, 8, b); };
  Pipeline pipeline(std::move(spec), make_scheduler(true));
  self = &pipeline;
  try {
    pipeline.run();
    ADD_FAILURE() << "the run should have failed";
  } catch (const PipelineError& e) {
    EXPECT_EQ(std::string(e.what()),
              "pipeline stopped: rank 1 (10.0.0.2) lost: no heartbeat for 3.0 s");
  }
}

TEST(Pipeline, SimDeviceChargesItsDurationsAsynchronously) {
  models::ModelSpec ms = models::gpt_spec(5, 16, 2, 6, 11);
  const models::Model model = models::Model::build(ms);
  ScheduleParams p;
  p.kind = ScheduleKind::one_f_one_b;
  p.stages = 4;
  p.slices = 4;
  p.minibatch_size = 8;
  p.minibatches = 2;
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p, "sim");
  spec.sim_costs = models::SimCosts::uniform(model.num_layers(), 0.2, 0.3, 0.1, 0.05);
  spec.data = [&](std::int64_t) {
    return MinibatchData::whole(Tensor::empty({8, 6}, DType::i32, Device::sim()),
                                Tensor::empty({8, 6}, DType::i32, Device::sim()));
  };
  Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
  const PipelineResult r = pipeline.run();
  for (const StageStats& s : r.stages) {
    // Each stage holds 2 layers: per slice F 0.4 ms, B 2 x (0.3 + 0.1) ms, except that the
    // first stage computes no input gradient for its first layer; a STEP 0.05 ms.
    const double backward = s.stage == 0 ? 0.5 : 0.8;
    const double expected_ms = 2 * (4 * (0.4 + backward) + 0.05);
    EXPECT_NEAR(s.busy_s * 1e3, expected_ms, 1e-4) << "stage " << s.stage;
    EXPECT_EQ(s.device_name, "sim");
  }
}

}  // namespace
}  // namespace tandem::actors

namespace tandem::actors {
namespace {

using namespace testing;

TEST(Pipeline, ReportsEachMinibatchAsItCompletesAndFollowsTheLearningRateSchedule) {
  const models::Model model = tiny_mlp();
  schedules::ScheduleParams p;
  p.kind = schedules::ScheduleKind::one_f_one_b;
  p.stages = 3;
  p.slices = 4;
  p.minibatch_size = 8;
  p.minibatches = 4;
  std::vector<std::pair<std::int64_t, double>> seen;
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.seed = 4;
  spec.data = [&](std::int64_t b) { return make_minibatch(model, 8, b); };
  spec.on_minibatch = [&](std::int64_t b, const MinibatchReport& r) {
    EXPECT_EQ(r.rows, 8);
    seen.emplace_back(b, r.loss);  // the coordinator is one actor: no lock needed
  };
  // Rounds 1 and 3 learn nothing: only minibatches 0 and 2 change the weights.
  spec.lr_at = [](std::int64_t round) { return round % 2 == 1 ? 0.0 : 0.1; };
  Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
  const PipelineResult r = pipeline.run();
  ASSERT_EQ(seen.size(), 4u);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].first, static_cast<std::int64_t>(i));
    EXPECT_DOUBLE_EQ(seen[i].second, r.losses[i]);
  }
  models::OptimizerSpec opt;
  opt.lr = 0.1;
  auto optimizer = models::make_optimizer(opt);
  models::ParamSet expected = model.init_params(4);
  for (std::int64_t b : {0, 2}) {
    // Minibatch 1 ran on the weights after minibatch 0, and changed nothing.
    optimizer->step(expected, reference_grads(model, expected, make_minibatch(model, 8, b), 4, b));
  }
  EXPECT_LE(max_relative_error(pipeline.params(), expected), 1e-5);
}

}  // namespace
}  // namespace tandem::actors
