// Tied parameters through the API: GptOptions::tie_embeddings and Model::tie (node names in a
// graph), bad ties refused naming them, and whole-model files that store a tied parameter once:
// save_weights / load_weights with the model round trip, init_from fills the copies, and a file
// whose copy differs from its leader is refused naming the copy.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <tandem/tandem.hpp>
#include <vector>

#include "../train/temp_dir.hpp"
#include "api_test_util.hpp"

namespace tandem {
namespace {

using api_test::kClasses;
using api_test::kFeatures;
using api_test::refusal;
using apps::testing::TempDir;

// a and b read the input alike and s sums them: their gradients are equal, so the tied copies
// stay equal whichever stage each is on. Layers: 0 a, 1 b, 2 s, 3 out.
Model tied_graph() {
  return Model::graph({kFeatures},
                      {{"a", layers::linear(kFeatures, 8), {}},
                       {"b", layers::linear(kFeatures, 8), {"x"}},
                       {"s", layers::add(), {"a", "b"}},
                       {"out", layers::linear(8, kClasses), {}}},
                      "x")
      .tie({"a.weight", "b.weight"})
      .tie({"0.bias", "b.bias"});
}

TrainOptions two_stages(std::int64_t minibatches) {
  TrainOptions o;
  o.plan.stages = {{0, 1, {tandem::Device::cpu()}},
                   {1, 4, {tandem::Device::cpu()}}};  // the copies on different stages
  o.plan.schedule = Schedule::one_f_one_b;
  o.plan.minibatch = api_test::kMinibatch;
  o.plan.slices = 2;
  o.minibatches = minibatches;
  o.optimizer = tandem::AdamWOptions{.lr = 1e-2};
  o.seed = 5;
  o.data = api_test::make_batch;
  o.threads = 2;
  return o;
}

std::vector<float> values(const Tensor& t) {
  return t.to_float_vector();
}

const Tensor& named(const std::vector<NamedTensor>& tensors, const std::string& name) {
  for (const NamedTensor& t : tensors) {
    if (t.name == name) return t.value;
  }
  throw std::out_of_range("no tensor " + name);
}

bool has(const std::vector<NamedTensor>& tensors, const std::string& name) {
  for (const NamedTensor& t : tensors) {
    if (t.name == name) return true;
  }
  return false;
}

TEST(TiedWeights, GptTiesItsEmbeddingsAndModelTieNamesNodes) {
  GptOptions o;
  o.layers = 2;
  o.d_model = 16;
  o.heads = 2;
  o.seq_len = 8;
  o.vocab = 24;
  o.tie_embeddings = true;
  const Model gpt = Model::gpt(o);
  EXPECT_EQ(gpt.ties(), (std::vector<std::vector<std::string>>{{"0.tokens", "4.weight"}}));
  EXPECT_NE(gpt.describe().find("tie_embeddings"), std::string::npos);
  o.tie_embeddings = false;
  EXPECT_TRUE(Model::gpt(o).ties().empty());

  const Model g = tied_graph();
  EXPECT_EQ(g.ties(), (std::vector<std::vector<std::string>>{{"0.weight", "1.weight"},
                                                             {"0.bias", "1.bias"}}));
  EXPECT_NE(g.describe().find("tie=0.weight=1.weight"), std::string::npos) << g.describe();

  EXPECT_NE(refusal([&] { (void)gpt.tie({"0.positions"}); }).find("at least two parameters"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              (void)gpt.tie({"1.nope", "2.nope"});
            }).find("no parameter '1.nope'"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              (void)Model::gpt(o).tie({"0.tokens", "4.bias"});
            }).find("'4.bias' has shape [24]"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              (void)gpt.tie({"4.weight", "0.positions"});
            }).find("already tied"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              (void)g.tie({"out.weight", "s.weight"});
            }).find("Model::tie"),
            std::string::npos);
}

TEST(TiedWeights, AFileStoresATiedParameterOnceAndLoadingFillsTheCopies) {
  TempDir dir;
  const Model model = tied_graph();
  Session trained(model, two_stages(6));
  trained.run();
  Weights w;
  w.model = trained.model_name();
  w.step = 6;
  w.tensors = trained.weights();
  ASSERT_EQ(values(named(w.tensors, "1.weight")), values(named(w.tensors, "0.weight")));

  const std::string file = (dir.path() / "tied.safetensors").string();
  save_weights(file, w, model);
  const Weights stored = load_weights(file);  // what the file holds
  EXPECT_FALSE(has(stored.tensors, "1.weight"));
  EXPECT_FALSE(has(stored.tensors, "1.bias"));
  EXPECT_EQ(stored.tensors.size(), w.tensors.size() - 2);

  const Weights back = load_weights(file, model);
  ASSERT_EQ(back.tensors.size(), w.tensors.size());
  for (std::size_t i = 0; i < w.tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].name, w.tensors[i].name);
    EXPECT_EQ(values(back.tensors[i].value), values(w.tensors[i].value)) << w.tensors[i].name;
  }

  // A run started from the file has the trained weights, copies included.
  TrainOptions warm = two_stages(1);
  warm.init_from = file;
  const Tensor x = api_test::make_batch(99).inputs;
  EXPECT_EQ(values(Session(model, std::move(warm)).predict(x)), values(trained.predict(x)));
}

TEST(TiedWeights, ACopyThatDiffersFromItsLeaderIsRefusedNamingIt) {
  TempDir dir;
  const Model model = tied_graph();
  Session trained(model, two_stages(2));
  trained.run();
  Weights w;
  w.model = trained.model_name();
  w.tensors = trained.weights();
  for (NamedTensor& t : w.tensors) {
    if (t.name != "1.weight") continue;
    t.value = t.value.clone();
    t.value.data<float>()[3] += 1.0f;
  }
  const std::string file = (dir.path() / "differs.safetensors").string();
  const std::string why = refusal([&] { save_weights(file, w, model); });
  EXPECT_NE(why.find("tensor '1.weight' differs from '0.weight', the parameter it is tied to"),
            std::string::npos)
      << why;
  EXPECT_FALSE(std::filesystem::exists(file));

  // Written without the model (a file of any tensors), it is refused where it is read as the
  // model's.
  save_weights(file, w);
  EXPECT_NE(refusal([&] { (void)load_weights(file, model); }).find("'1.weight' differs"),
            std::string::npos);
  TrainOptions warm = two_stages(1);
  warm.init_from = file;
  EXPECT_NE(refusal([&] { Session s(model, std::move(warm)); }).find("'1.weight' differs"),
            std::string::npos);

  // A file that is not this model's at all.
  w.tensors.pop_back();
  EXPECT_NE(refusal([&] { save_weights(file, w, model); }).find("is missing"), std::string::npos);
}

}  // namespace
}  // namespace tandem
