// Delay corrections (models/delay_correction.hpp) against hand-computed steps. The numbers are
// chosen so that every intermediate is exact in float: the expectations are exact.
#include "models/delay_correction.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace tandem::models {
namespace {

ParamSet one(const std::vector<float>& values) {
  ParamSet s;
  s.add("w", Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())}));
  return s;
}

std::vector<float> values(const ParamSet& s, const std::string& name = "w") {
  return s.at(name).to_float_vector();
}

const DelayCorrected& corrected(const Optimizer& opt) {
  return dynamic_cast<const DelayCorrected&>(opt);
}

TEST(DelayCorrection, NamesRoundTripAndUnknownIsRefused) {
  for (auto c :
       {AsyncCorrection::none, AsyncCorrection::weight_prediction, AsyncCorrection::nesterov}) {
    EXPECT_EQ(parse_async_correction(async_correction_name(c)), c);
  }
  try {
    (void)parse_async_correction("lookahead");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("weight-prediction"), std::string::npos) << e.what();
  }
}

TEST(DelayCorrection, Factors) {
  EXPECT_EQ(correction_factor(AsyncCorrection::none, 3, 0.9), 0.0);
  EXPECT_EQ(correction_factor(AsyncCorrection::weight_prediction, 3, 0.9), 3.0);
  EXPECT_EQ(correction_factor(AsyncCorrection::nesterov, 2, 0.5), 0.75);
  EXPECT_EQ(correction_factor(AsyncCorrection::nesterov, 0, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(correction_factor(AsyncCorrection::nesterov, 3, 0.9), 0.9 + 0.81 + 0.729);
}

// SGD, momentum 0.5, lr 0.5, delay 2: the version is W - lr * 2 * buf (PipeOptim's rule).
TEST(DelayCorrection, WeightPredictionWithSgdMomentum) {
  auto opt = make_optimizer({.kind = "sgd", .lr = 0.5, .momentum = 0.5},
                            AsyncCorrection::weight_prediction, 2);
  ASSERT_FALSE(opt->fused_update().has_value());
  ParamSet p = one({1.0f, -2.0f});
  // buf = [0.5, 1]; master = [1, -2] - 0.5 buf = [0.75, -2.5]; version = master - 0.5*2*buf.
  opt->step(p, one({0.5f, 1.0f}));
  EXPECT_EQ(values(corrected(*opt).master()), (std::vector<float>{0.75f, -2.5f}));
  EXPECT_EQ(values(p), (std::vector<float>{0.25f, -3.5f}));
  // The gradient (of the version) updates the master, not the version:
  // buf = 0.5 [0.5, 1] + [1, -1] = [1.25, -0.5]; master = [0.75, -2.5] - 0.5 buf.
  opt->step(p, one({1.0f, -1.0f}));
  EXPECT_EQ(values(corrected(*opt).master()), (std::vector<float>{0.125f, -2.25f}));
  EXPECT_EQ(values(p), (std::vector<float>{-1.125f, -1.75f}));
  EXPECT_EQ(opt->steps(), 2);
}

// The same with nesterov: c = 0.5 + 0.25 = 0.75 times the last update.
TEST(DelayCorrection, NesterovWithSgdMomentum) {
  auto opt =
      make_optimizer({.kind = "sgd", .lr = 0.5, .momentum = 0.5}, AsyncCorrection::nesterov, 2);
  ParamSet p = one({1.0f, -2.0f});
  opt->step(p, one({0.5f, 1.0f}));
  // master [0.75, -2.5], last update [-0.25, -0.5]
  EXPECT_EQ(values(p), (std::vector<float>{0.5625f, -2.875f}));
  opt->step(p, one({1.0f, -1.0f}));
  // master [0.125, -2.25], last update [-0.625, 0.25]
  EXPECT_EQ(values(corrected(*opt).master()), (std::vector<float>{0.125f, -2.25f}));
  EXPECT_EQ(values(p), (std::vector<float>{-0.34375f, -2.0625f}));
}

// Plain SGD: the direction is the last gradient.
TEST(DelayCorrection, WeightPredictionWithPlainSgdUsesTheLastGradient) {
  auto opt = make_optimizer({.kind = "sgd", .lr = 0.25}, AsyncCorrection::weight_prediction, 3);
  ASSERT_FALSE(opt->fused_update().has_value());
  ParamSet p = one({1.0f});
  opt->step(p, one({2.0f}));  // master 0.5; version 0.5 - 3 * 0.25 * 2
  EXPECT_EQ(values(p), (std::vector<float>{-1.0f}));
  opt->step(p, one({-1.0f}));  // master 0.75; version 0.75 + 3 * 0.25
  EXPECT_EQ(values(p), (std::vector<float>{1.5f}));
}

TEST(DelayCorrection, NesterovNeedsAMomentum) {
  try {
    (void)make_optimizer({.kind = "sgd", .lr = 0.1}, AsyncCorrection::nesterov, 2);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("async_correction"), std::string::npos) << e.what();
  }
}

// AdamW: the master is plain AdamW's weights bit for bit, the version extrapolates its update.
TEST(DelayCorrection, WeightPredictionWithAdamW) {
  const OptimizerSpec spec{.kind = "adamw", .lr = 0.01, .weight_decay = 0.1};
  auto opt = make_optimizer(spec, AsyncCorrection::weight_prediction, 3);
  auto plain = make_optimizer(spec);
  ParamSet p = one({1.0f, -2.0f, 0.5f});
  ParamSet q = p.clone();
  const std::vector<std::vector<float>> grads = {{0.5f, -1.0f, 2.0f}, {0.25f, 1.0f, -3.0f}};
  for (const auto& g : grads) {
    const std::vector<float> before =
        values(corrected(*opt).master().empty() ? p : corrected(*opt).master());
    opt->step(p, one(g));
    plain->step(q, one(g));
    const std::vector<float> m = values(corrected(*opt).master());
    EXPECT_EQ(m, values(q));
    for (std::size_t i = 0; i < m.size(); ++i) {
      const float expected = m[i] + 3.0f * (m[i] - before[i]);
      EXPECT_EQ(values(p)[i], expected) << i;
    }
    if (opt->steps() == 1) {
      // Adam's first step moves a weight by about lr * (sign(g) + wd * w): 0.011 for the
      // first; the version is 1 + 3 such steps from the start.
      EXPECT_NEAR(m[0], 1.0f - 0.011f, 1e-6);
      EXPECT_NEAR(values(p)[0], 1.0f - 4 * 0.011f, 1e-6);
    }
  }
}

TEST(DelayCorrection, DelayZeroIsThePlainOptimizer) {
  const OptimizerSpec spec{.kind = "adamw", .lr = 0.01};
  auto opt = make_optimizer(spec, AsyncCorrection::nesterov, 0);
  auto plain = make_optimizer(spec);
  ParamSet p = one({1.0f, -2.0f});
  ParamSet q = p.clone();
  for (int i = 0; i < 3; ++i) {
    opt->step(p, one({0.3f, -0.7f}));
    plain->step(q, one({0.3f, -0.7f}));
  }
  EXPECT_EQ(values(p), values(q));
}

// The update never writes into a tensor another handle (a stashed version) shares.
TEST(DelayCorrection, StashedVersionsStayUntouched) {
  auto opt = make_optimizer({.kind = "sgd", .lr = 0.5, .momentum = 0.5},
                            AsyncCorrection::weight_prediction, 1);
  ParamSet p = one({1.0f});
  const ParamSet stash = p;  // shares storage
  opt->step(p, one({1.0f}));
  EXPECT_EQ(values(stash), (std::vector<float>{1.0f}));
  EXPECT_NE(values(p), values(stash));
}

// state() holds the inner optimizer's entries and the master; a fresh optimizer loaded with it
// continues bit for bit.
TEST(DelayCorrection, StateRoundTripResumesBitForBit) {
  const OptimizerSpec spec{.kind = "adamw", .lr = 0.01};
  auto opt = make_optimizer(spec, AsyncCorrection::weight_prediction, 2);
  ParamSet p = one({1.0f, -2.0f});
  opt->step(p, one({0.3f, -0.7f}));
  opt->step(p, one({0.1f, 0.2f}));
  const ParamSet state = opt->state();
  EXPECT_TRUE(state.contains("master.w"));
  EXPECT_TRUE(state.contains("exp_avg.w"));
  EXPECT_TRUE(state.contains("exp_avg_sq.w"));

  auto resumed = make_optimizer(spec, AsyncCorrection::weight_prediction, 2);
  ParamSet r = p.clone();
  resumed->load_state(state, opt->steps(), r);
  EXPECT_EQ(resumed->steps(), 2);
  EXPECT_EQ(resumed->state().fingerprint(), state.fingerprint());
  for (int i = 0; i < 3; ++i) {
    opt->step(p, one({0.5f, -0.25f}));
    resumed->step(r, one({0.5f, -0.25f}));
    EXPECT_EQ(values(p), values(r)) << i;
    EXPECT_EQ(opt->state().fingerprint(), resumed->state().fingerprint()) << i;
  }
}

TEST(DelayCorrection, CheckStateRefusesWhatDoesNotFit) {
  const OptimizerSpec spec{.kind = "sgd", .lr = 0.1, .momentum = 0.9};
  auto opt = make_optimizer(spec, AsyncCorrection::weight_prediction, 1);
  ParamSet p = one({1.0f, 2.0f});
  opt->step(p, one({1.0f, 1.0f}));
  const ParamSet good = opt->state();
  EXPECT_NO_THROW(opt->check_state(good, p));
  EXPECT_NO_THROW(opt->check_state(ParamSet(), p));  // no step taken yet

  const auto refused = [&](const ParamSet& state, const std::string& entry) {
    try {
      opt->check_state(state, p);
      ADD_FAILURE() << "accepted";
    } catch (const OptimizerStateError& e) {
      EXPECT_EQ(e.entry(), entry) << e.what();
    }
  };
  ParamSet no_master;
  no_master.add("momentum.w", good.at("momentum.w"));
  refused(no_master, "master.w");
  ParamSet wrong_shape;
  wrong_shape.add("momentum.w", good.at("momentum.w"));
  wrong_shape.add("master.w", Tensor::from_vector(std::vector<float>{1.0f}, {1}));
  refused(wrong_shape, "master.w");
  ParamSet stranger = good.clone();
  stranger.add("master.v", Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2}));
  refused(stranger, "master.v");
  ParamSet bad_inner;
  bad_inner.add("master.w", good.at("master.w"));
  bad_inner.add("momentum.w", Tensor::from_vector(std::vector<float>{1.0f}, {1}));
  refused(bad_inner, "momentum.w");
}

}  // namespace
}  // namespace tandem::models
