// Tied parameters: the copies start equal, a one-device step sums their gradients (so every copy
// moves by the same update and they stay bit-identical), and bad ties are refused naming them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/train_step.hpp"

namespace tandem::models {
namespace {

ModelSpec tied_gpt() {
  ModelSpec spec = gpt_spec(2, 16, 2, 8, 24);
  spec.tie_embeddings = true;
  return spec;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data<float>(), b.data<float>(), a.nbytes()) == 0;
}

Tensor tokens(std::int64_t batch, std::int64_t len, std::int64_t vocab, std::int64_t salt) {
  Tensor t = Tensor::empty({batch, len}, DType::i32);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7 + salt * 3 + 1) % vocab);
  }
  return t;
}

TEST(TiedParams, GptTiesItsHeadToTheTokenEmbedding) {
  const Model model = Model::build(tied_gpt());
  ASSERT_EQ(model.ties().size(), 1u);
  const TieGroup& g = model.ties()[0];
  ASSERT_EQ(g.copies.size(), 2u);
  EXPECT_EQ(g.copies[0].name, "0.tokens");
  EXPECT_EQ(g.copies[1].name, std::to_string(model.num_layers() - 1) + ".weight");
  EXPECT_NE(model.spec().describe().find("tie_embeddings"), std::string::npos);
  EXPECT_TRUE(Model::build(gpt_spec(2, 16, 2, 8, 24)).ties().empty());
}

TEST(TiedParams, CopiesStartEqualWhateverRangeIsInitialised) {
  const Model model = Model::build(tied_gpt());
  const int n = model.num_layers();
  const ParamSet whole = model.init_params(11);
  const ParamSet head = model.init_params(11, n - 1, n);
  const std::string follower = model.ties()[0].copies[1].name;
  EXPECT_TRUE(same_bits(whole.at("0.tokens"), whole.at(follower)));
  EXPECT_TRUE(same_bits(whole.at("0.tokens"), head.at(follower)));
}

TEST(TiedParams, AOneDeviceStepKeepsTheCopiesBitIdentical) {
  const Model model = Model::build(tied_gpt());
  ParamSet params = model.init_params(5);
  OptimizerSpec opt;
  opt.kind = "adamw";
  opt.lr = 0.01;
  auto optimizer = make_optimizer(opt);
  const std::string follower = model.ties()[0].copies[1].name;
  const ParamSet before = params.clone();
  for (std::int64_t step = 0; step < 3; ++step) {
    const Tensor x = tokens(4, 8, 24, step);
    const Tensor y = tokens(4, 8, 24, step + 1);
    const StepOutput out = train_step(model, params, *optimizer, x, y, 1 + step);
    ASSERT_FALSE(out.grads.empty());
    EXPECT_TRUE(same_bits(out.grads.at("0.tokens"), out.grads.at(follower)));
    EXPECT_TRUE(same_bits(params.at("0.tokens"), params.at(follower)));
  }
  EXPECT_FALSE(same_bits(params.at("0.tokens"), before.at("0.tokens")));
}

TEST(TiedParams, TheGradientIsTheSumOfEveryCopysOwn) {
  const Model model = Model::build(tied_gpt());
  ParamSet params = model.init_params(5);
  const Tensor x = tokens(2, 8, 24, 0);
  const Tensor y = tokens(2, 8, 24, 1);
  // The same model untied, at the same weights: its two gradients must add up to the tied one.
  const Model untied = Model::build(gpt_spec(2, 16, 2, 8, 24));
  const StepOutput tied_out = train_step(model, params, x, y, 3);
  const StepOutput untied_out = train_step(untied, params, x, y, 3);
  const std::string follower = model.ties()[0].copies[1].name;
  const auto a = untied_out.grads.at("0.tokens").to_float_vector();
  const auto b = untied_out.grads.at(follower).to_float_vector();
  const auto sum = tied_out.grads.at("0.tokens").to_float_vector();
  ASSERT_EQ(a.size(), sum.size());
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(sum[i], a[i] + b[i]) << i;
}

ModelSpec mlp_with_ties(std::vector<std::vector<std::string>> ties) {
  ModelSpec spec = mlp_spec({4, 4, 4, 3});
  spec.ties = std::move(ties);
  return spec;
}

std::string build_error(const ModelSpec& spec) {
  try {
    (void)Model::build(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(TiedParams, BadTiesAreRefusedNamingThem) {
  EXPECT_NE(build_error(mlp_with_ties({{"0.weight", "2.weight"}})).find("shape"),
            std::string::npos);
  EXPECT_NE(build_error(mlp_with_ties({{"0.weight", "9.weight"}})).find("no parameter '9.weight'"),
            std::string::npos);
  EXPECT_NE(build_error(mlp_with_ties({{"0.weight"}})).find("at least two"), std::string::npos);
  EXPECT_NE(build_error(mlp_with_ties({{"0.weight", "0.weight"}})).find("already tied"),
            std::string::npos);
  EXPECT_NE(build_error(mlp_with_ties({{"0.weight", "1.weight"}, {"1.weight", "0.weight"}}))
                .find("tie 1"),
            std::string::npos);
  EXPECT_EQ(build_error(mlp_with_ties({{"0.weight", "1.weight"}})), "");
  EXPECT_EQ(build_error(mlp_with_ties({{"0.bias", "1.bias"}})).find("shape"), std::string::npos);
}

}  // namespace
}  // namespace tandem::models
