// The delay-injection harness (models/delayed_training.hpp): at delay 0 it is plain training
// bit for bit; with delays, each stage's gradient is computed at its own older weights.
#include "models/delayed_training.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "models/model_spec.hpp"
#include "models/train_step.hpp"

namespace tandem::models {
namespace {

Tensor ids(const Shape& shape, std::int64_t vocab, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::i32);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<std::int32_t>()[i] =
        static_cast<std::int32_t>((i * 7919 + static_cast<std::int64_t>(seed) * 104729) % vocab);
  }
  return t;
}

struct Fixture {
  Model model = Model::build(gpt_spec(2, 16, 2, 6, 11));  // 5 layers
  ParamSet init = model.init_params(3);
  Tensor x(std::int64_t step) const { return ids(model.input_shape(4), 11, 2 * step + 1); }
  Tensor y(std::int64_t step) const { return ids(model.target_shape(4), 11, 2 * step + 2); }
};

bool same_bits(const ParamSet& a, const ParamSet& b) {
  if (a.names() != b.names()) return false;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    if (a[i].nbytes() != b[i].nbytes() ||
        std::memcmp(a[i].data<float>(), b[i].data<float>(), a[i].nbytes()) != 0)
      return false;
  }
  return true;
}

TEST(DelayedTraining, DelayZeroIsPlainTrainingBitForBit) {
  const Fixture f;
  const OptimizerSpec spec{.kind = "adamw", .lr = 1e-2, .weight_decay = 0.01};
  DelayedTrainingSpec ds{.model = &f.model,
                         .stages = {{0, 2, 0}, {2, 3, 0}, {3, 5, 0}},
                         .optimizer = spec,
                         .lr_at = [](std::int64_t t) { return 1e-2 / static_cast<double>(t + 1); }};
  DelayedTrainer delayed(ds, f.init);
  ParamSet plain = f.init.clone();
  auto opt = make_optimizer(spec);
  opt->attach(f.model);
  for (std::int64_t t = 0; t < 5; ++t) {
    opt->set_lr(1e-2 / static_cast<double>(t + 1));
    const StepOutput a = train_step(f.model, plain, *opt, f.x(t), f.y(t), 100 + t);
    const StepOutput b = delayed.step(f.x(t), f.y(t), 100 + t);
    EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(float)), 0) << t;
  }
  EXPECT_TRUE(same_bits(delayed.params(), plain));
  EXPECT_FALSE(same_bits(plain, f.init));
}

// Stage 0 (delay 2) computes steps 0-2's gradients at versions 0, 0, 1; stage 1 (delay 0) at
// its newest. Checked against train_step on weights assembled by hand.
TEST(DelayedTraining, EachStageReadsItsDelayedVersion) {
  const Fixture f;
  const OptimizerSpec spec{.kind = "sgd", .lr = 0.1, .momentum = 0.9};
  DelayedTrainingSpec ds{
      .model = &f.model, .stages = {{0, 3, 2}, {3, 5, 0}}, .optimizer = spec, .lr_at = {}};
  DelayedTrainer delayed(ds, f.init);
  std::vector<std::string> first, second;
  for (std::int64_t i = 0; i < f.init.size(); ++i) {
    const std::string& n = f.init.name(i);
    (n.starts_with("0.") || n.starts_with("1.") || n.starts_with("2.") ? first : second)
        .push_back(n);
  }
  std::vector<ParamSet> versions0 = {f.init.subset(first).clone()};
  for (std::int64_t t = 0; t < 3; ++t) {
    ParamSet expected_weights =
        versions0[static_cast<std::size_t>(std::max<std::int64_t>(0, t - 2))];
    expected_weights.merge(delayed.params().subset(second));
    const StepOutput want = train_step(f.model, expected_weights, f.x(t), f.y(t), 7);
    const StepOutput got = delayed.step(f.x(t), f.y(t), 7);
    EXPECT_EQ(std::memcmp(&want.loss, &got.loss, sizeof(float)), 0) << t;
    versions0.push_back(delayed.params().subset(first).clone());
  }
  EXPECT_THROW(
      DelayedTrainer({.model = &f.model, .stages = {{0, 3, 0}}, .optimizer = spec}, f.init),
      std::invalid_argument);
  EXPECT_THROW(
      DelayedTrainer({.model = &f.model, .stages = {{0, 3, -1}, {3, 5, 0}}, .optimizer = spec},
                     f.init),
      std::invalid_argument);
}

}  // namespace
}  // namespace tandem::models
