// Optimizers against hand-computed updates.
#include "models/optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace tandem::models {
namespace {

ParamSet one(const std::vector<float>& values) {
  ParamSet s;
  s.add("w", Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())}));
  return s;
}

std::vector<float> values(const ParamSet& s) {
  return s[0].to_float_vector();
}

TEST(Sgd, PlainStepWithWeightDecay) {
  auto opt = make_optimizer({.kind = "sgd", .lr = 0.1, .weight_decay = 0.01});
  ParamSet p = one({1.0f, -2.0f});
  opt->step(p, one({0.5f, 0.25f}));
  // p - lr (g + wd p)
  EXPECT_FLOAT_EQ(values(p)[0], 0.949f);
  EXPECT_FLOAT_EQ(values(p)[1], -2.023f);
  EXPECT_EQ(opt->steps(), 1);
}

TEST(Sgd, MomentumBufferStartsAtTheFirstGradient) {
  auto opt = make_optimizer({.kind = "sgd", .lr = 0.1, .momentum = 0.9});
  ParamSet p = one({1.0f});
  opt->step(p, one({1.0f}));  // buf = 1, p = 1 - 0.1
  EXPECT_FLOAT_EQ(values(p)[0], 0.9f);
  opt->step(p, one({0.5f}));  // buf = 0.9 + 0.5 = 1.4, p = 0.9 - 0.14
  EXPECT_FLOAT_EQ(values(p)[0], 0.76f);
  opt->step(p, one({0.0f}));  // buf = 1.26, p = 0.76 - 0.126
  EXPECT_FLOAT_EQ(values(p)[0], 0.634f);
}

TEST(Sgd, Nesterov) {
  auto opt = make_optimizer({.kind = "sgd", .lr = 0.1, .momentum = 0.5, .nesterov = true});
  ParamSet p = one({2.0f});
  opt->step(p, one({1.0f}));  // buf = 1, d = 1 + 0.5 * 1 = 1.5, p = 2 - 0.15
  EXPECT_FLOAT_EQ(values(p)[0], 1.85f);
  opt->step(p, one({2.0f}));  // buf = 0.5 + 2 = 2.5, d = 2 + 1.25 = 3.25, p = 1.85 - 0.325
  EXPECT_FLOAT_EQ(values(p)[0], 1.525f);
}

TEST(Sgd, FusedUpdateEqualsStep) {
  const OptimizerSpec spec{.kind = "sgd", .lr = 0.05, .weight_decay = 0.2};
  auto opt = make_optimizer(spec);
  const auto fused = opt->fused_update();
  ASSERT_TRUE(fused.has_value());
  ParamSet p = one({3.0f, -1.0f});
  opt->step(p, one({0.4f, 0.8f}));
  EXPECT_NEAR(values(p)[0], fused->beta * 3.0f + fused->alpha * 0.4f, 1e-6);
  EXPECT_NEAR(values(p)[1], fused->beta * -1.0f + fused->alpha * 0.8f, 1e-6);
  EXPECT_FALSE(make_optimizer({.kind = "sgd", .momentum = 0.9})->fused_update().has_value());
  EXPECT_FALSE(make_optimizer({.kind = "adamw"})->fused_update().has_value());
}

TEST(AdamW, FirstTwoSteps) {
  const double lr = 0.01, wd = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  auto opt = make_optimizer(
      {.kind = "adamw", .lr = lr, .weight_decay = wd, .beta1 = b1, .beta2 = b2, .eps = eps});
  ParamSet p = one({1.0f});
  opt->step(p, one({0.5f}));
  // Step 1: bias-corrected moments are g and g^2, so the step is lr * g / (|g| + eps).
  double want = 1.0 * (1 - lr * wd) - lr * 0.5 / (0.5 + eps);
  EXPECT_NEAR(values(p)[0], want, 1e-6);
  opt->step(p, one({-0.25f}));
  const double m = b1 * (1 - b1) * 0.5 + (1 - b1) * -0.25;
  const double v = b2 * (1 - b2) * 0.25 + (1 - b2) * 0.0625;
  const double bc1 = 1 - b1 * b1, bc2 = 1 - b2 * b2;
  want = want * (1 - lr * wd) - (lr / bc1) * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
  EXPECT_NEAR(values(p)[0], want, 1e-6);
}

TEST(Optimizer, SharedWeightsAreUpdatedCopyOnWrite) {
  for (const char* kind : {"sgd", "adamw"}) {
    auto opt = make_optimizer({.kind = kind, .lr = 0.1});
    ParamSet live = one({1.0f, 2.0f});
    const ParamSet stashed = live;  // a kept version: shares storage
    opt->step(live, one({1.0f, 1.0f}));
    EXPECT_EQ(values(stashed), (std::vector<float>{1.0f, 2.0f})) << kind;
    EXPECT_NE(values(live), values(stashed)) << kind;
    EXPECT_FALSE(live[0].shares_storage(stashed[0])) << kind;
    // Once unshared, updates go in place.
    const void* before = live[0].raw_data();
    opt->step(live, one({1.0f, 1.0f}));
    EXPECT_EQ(live[0].raw_data(), before) << kind;
  }
}

TEST(Optimizer, StateRoundTripContinuesIdentically) {
  for (const OptimizerSpec& spec : {OptimizerSpec{.kind = "sgd", .lr = 0.1, .momentum = 0.9},
                                    OptimizerSpec{.kind = "adamw", .lr = 0.01}}) {
    auto a = make_optimizer(spec);
    ParamSet pa = one({1.0f, -1.0f});
    a->step(pa, one({0.3f, 0.1f}));
    auto b = make_optimizer(spec);
    b->load_state(a->state(), a->steps(), pa);
    ParamSet pb = pa.clone();
    a->step(pa, one({-0.2f, 0.4f}));
    b->step(pb, one({-0.2f, 0.4f}));
    EXPECT_EQ(values(pa), values(pb)) << spec.kind;
  }
}

TEST(Optimizer, RejectsBadSpecsAndMismatchedGradients) {
  auto message = [](const OptimizerSpec& s) {
    try {
      make_optimizer(s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.kind = "lamb"}).find("kind"), std::string::npos);
  EXPECT_NE(message({.kind = "sgd", .lr = -1}).find("lr"), std::string::npos);
  EXPECT_NE(message({.kind = "sgd", .nesterov = true}).find("nesterov"), std::string::npos);
  EXPECT_NE(message({.kind = "adamw", .beta2 = 1.0}).find("beta2"), std::string::npos);
  auto opt = make_optimizer({.kind = "sgd"});
  ParamSet p = one({1.0f});
  EXPECT_THROW(opt->step(p, one({1.0f, 2.0f})), std::invalid_argument);
  ParamSet other;
  other.add("v", Tensor::zeros({1}));
  EXPECT_THROW(opt->step(p, other), std::invalid_argument);
}

// Two parameters and the state one AdamW step leaves for them.
struct Trained {
  ParamSet params;
  ParamSet state;
};

Trained trained(const OptimizerSpec& spec) {
  Trained t;
  t.params.add("a", Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}, {2, 2}));
  t.params.add("b", Tensor::from_vector(std::vector<float>{5.0f}, {1}));
  auto opt = make_optimizer(spec);
  ParamSet grads = t.params.zeros_like();
  opt->step(t.params, grads);
  t.state = opt->state();
  return t;
}

// `state` with entry `name` replaced by `tensor` (or dropped when undefined), order kept.
ParamSet replaced(const ParamSet& state, const std::string& name, const Tensor& tensor) {
  ParamSet out;
  for (std::int64_t i = 0; i < state.size(); ++i) {
    if (state.name(i) != name) {
      out.add(state.name(i), state[i]);
    } else if (tensor.defined()) {
      out.add(name, tensor);
    }
  }
  return out;
}

// load_state's refusal: an OptimizerStateError naming the entry, with `detail` in its text.
void expect_refused(const OptimizerSpec& spec, const ParamSet& state, const ParamSet& params,
                    const std::string& entry, const std::string& detail) {
  auto opt = make_optimizer(spec);
  try {
    opt->load_state(state, 1, params);
    ADD_FAILURE() << "accepted state without '" << entry << "' fitting";
  } catch (const OptimizerStateError& e) {
    EXPECT_EQ(e.entry(), entry) << e.what();
    EXPECT_NE(std::string(e.what()).find(detail), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("optimizer " + spec.kind + ": state '" + entry, 0), 0u)
        << e.what();
  }
}

// step() runs over each parameter's element count: moments of another size or dtype, or a
// moment without its partner, were read out of bounds (SIGBUS) or reached the user as
// "unordered_map::at".
TEST(AdamW, LoadStateRefusesMomentsThatDoNotFitTheParameters) {
  const OptimizerSpec spec{.kind = "adamw", .lr = 0.01};
  const Trained t = trained(spec);
  ASSERT_EQ(t.state.names(),
            (std::vector<std::string>{"exp_avg.a", "exp_avg_sq.a", "exp_avg.b", "exp_avg_sq.b"}));
  expect_refused(spec, replaced(t.state, "exp_avg.a", Tensor::zeros({2})), t.params, "exp_avg.a",
                 "shape [2], but parameter 'a' has shape [2, 2]");
  expect_refused(spec, replaced(t.state, "exp_avg_sq.a", Tensor::zeros({4, 4})), t.params,
                 "exp_avg_sq.a", "shape [4, 4]");
  expect_refused(spec, replaced(t.state, "exp_avg.b", Tensor::zeros({1}, DType::bf16)), t.params,
                 "exp_avg.b", "dtype bf16, but parameter 'b' is f32");
  expect_refused(spec, replaced(t.state, "exp_avg_sq.b", Tensor()), t.params, "exp_avg.b",
                 "has no partner 'exp_avg_sq.b'");
  ParamSet extra = t.state;
  extra.add("exp_avg.c", Tensor::zeros({1}));
  expect_refused(spec, extra, t.params, "exp_avg.c", "names no parameter ('c')");
  ParamSet odd = t.state;
  odd.add("momentum.a", Tensor::zeros({2, 2}));
  expect_refused(spec, odd, t.params, "momentum.a", "neither exp_avg");
  const ParamSet only_a = t.params.subset(std::vector<std::string>{"a"});
  const ParamSet state_a =
      replaced(replaced(t.state, "exp_avg.b", Tensor()), "exp_avg_sq.b", Tensor());
  ParamSet more = t.params;
  more.add("c", Tensor::zeros({3}));
  expect_refused(spec, t.state, more, "exp_avg.c", "missing");
  // What fits loads: the full state, and none (no step taken).
  make_optimizer(spec)->load_state(t.state, 1, t.params);
  make_optimizer(spec)->load_state(state_a, 1, only_a);
  make_optimizer(spec)->load_state(ParamSet{}, 0, t.params);
}

TEST(Sgd, LoadStateRefusesBuffersThatDoNotFitTheParameters) {
  const OptimizerSpec spec{.kind = "sgd", .lr = 0.1, .momentum = 0.9};
  const Trained t = trained(spec);
  ASSERT_EQ(t.state.names(), (std::vector<std::string>{"momentum.a", "momentum.b"}));
  expect_refused(spec, replaced(t.state, "momentum.a", Tensor::zeros({3})), t.params, "momentum.a",
                 "shape [3], but parameter 'a' has shape [2, 2]");
  expect_refused(spec, replaced(t.state, "momentum.b", Tensor::zeros({1}, DType::i32)), t.params,
                 "momentum.b", "dtype i32");
  expect_refused(spec, replaced(t.state, "momentum.b", Tensor()), t.params, "momentum.b",
                 "missing");
  ParamSet extra = t.state;
  extra.add("momentum.z", Tensor::zeros({1}));
  expect_refused(spec, extra, t.params, "momentum.z", "names no parameter ('z')");
  ParamSet odd = t.state;
  odd.add("exp_avg.a", Tensor::zeros({2, 2}));
  expect_refused(spec, odd, t.params, "exp_avg.a", "not momentum.<parameter>");
  make_optimizer(spec)->load_state(t.state, 1, t.params);
}

}  // namespace
}  // namespace tandem::models
