// train::predict: the forward-only pipeline's outputs equal Model::forward for evaluation on the
// same weights and the same slices bit for bit on the CPU, on one stage and on four with a
// replicated stage, for a chain, a GPT and a graph model, and the whole batch's forward to
// rounding (BLAS kernels choose their order of summation by a product's shape); weights from a
// live session, a finished checkpoint and an exported whole-model file give the same outputs;
// inputs and weights that do not fit are refused naming the tensor.
#include "train/predict.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "../actors/pipeline_harness.hpp"
#include "temp_dir.hpp"
#include "train/config.hpp"
#include "train/model_file.hpp"
#include "train/session.hpp"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;
using actors::testing::even_plan;
using actors::testing::make_minibatch;
using apps::testing::TempDir;

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

Tensor reference(const models::Model& model, const models::ParamSet& weights, const Tensor& x) {
  models::Context ctx;
  ctx.training = false;
  ctx.keep_saved = false;
  return model.forward(ctx, weights, x, 0, model.num_layers()).y;
}

// The evaluation forward of `x` cut as predict cuts it into `slices` (equal slices,
// schedules::ScheduleParams::equal_slice), each slice on its own: products of the shapes that
// predict's stages compute.
Tensor sliced_reference(const models::Model& model, const models::ParamSet& weights,
                        const Tensor& x, int slices) {
  schedules::ScheduleParams p;
  p.slices = slices;
  p.minibatch_size = x.dim(0);
  std::vector<Tensor> parts;
  for (int i = 0; i < slices; ++i) {
    const schedules::Slice s = p.equal_slice(i);
    parts.push_back(reference(model, weights, x.slice(s.begin, s.end)));
  }
  return concat_rows(parts);
}

// The largest difference between `a` and `b` relative to b's largest magnitude.
double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_float_vector();
  const std::vector<float> y = b.to_float_vector();
  if (x.size() != y.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::abs(static_cast<double>(y[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

schedules::Plan plan_of(const models::Model& model, int stages, std::vector<int> replicas) {
  schedules::ScheduleParams p;
  p.kind = schedules::ScheduleKind::gpipe;
  p.stages = stages;
  p.slices = 3;
  p.replicas = std::move(replicas);
  return even_plan(model, p);
}

void expect_matches_forward(const models::Model& model, const Tensor& x) {
  const models::ParamSet weights = model.init_params(7);
  const Tensor whole = reference(model, weights, x);
  for (const auto& [stages, replicas] :
       std::vector<std::pair<int, std::vector<int>>>{{1, {}}, {4, {2, 1, 1, 1}}, {4, {}}}) {
    for (int slices : {0, 1, 5}) {
      const PredictResult r =
          predict(model, plan_of(model, stages, replicas), weights, x, {.slices = slices});
      const std::string where = model.spec().name + " on " + std::to_string(stages) + " stages, " +
                                std::to_string(r.slices) + " slices";
      EXPECT_TRUE(bitwise_equal(r.outputs, sliced_reference(model, weights, x, r.slices))) << where;
      EXPECT_LT(relative_difference(r.outputs, whole), 1e-5) << where;
    }
  }
}

TEST(Predict, MlpEqualsTheEvaluationForwardBitForBit) {
  const models::Model model = actors::testing::tiny_mlp();
  expect_matches_forward(model, make_minibatch(model, 13, 0).pieces[0].inputs);
}

TEST(Predict, GptEqualsTheEvaluationForwardBitForBit) {
  const models::Model model = actors::testing::tiny_gpt();  // dropout is off in evaluation
  expect_matches_forward(model, make_minibatch(model, 7, 0).pieces[0].inputs);
}

TEST(Predict, GraphEqualsTheEvaluationForwardBitForBit) {
  const models::Model model = actors::testing::tiny_graph();
  expect_matches_forward(model, make_minibatch(model, 11, 0).pieces[0].inputs);
}

TEST(Predict, RefusesInputsThatDoNotFit) {
  const models::Model model = actors::testing::tiny_mlp();
  const models::ParamSet weights = model.init_params(1);
  const schedules::Plan plan = plan_of(model, 1, {});
  const auto refuses = [&](const Tensor& x, const std::string& words) {
    try {
      predict(model, plan, weights, x);
      ADD_FAILURE() << "accepted " << x.describe();
    } catch (const PredictError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refuses(Tensor(), "at least one row");
  refuses(Tensor::zeros({4, 7}), "the model reads f32[4, 6]");
  refuses(Tensor::zeros({4, 6}, DType::i32), "the model reads");
  refuses(Tensor::zeros({0, 6}), "at least one row");
  Tensor nan = Tensor::zeros({4, 6});
  nan.data<float>()[2 * 6 + 5] = std::numeric_limits<float>::quiet_NaN();
  refuses(nan, "in row 2 at element 5: inputs must be finite");
  Tensor inf = Tensor::zeros({4, 6});
  inf.data<float>()[0] = -std::numeric_limits<float>::infinity();
  refuses(inf, "in row 0 at element 0");
}

TEST(Predict, RefusesWeightsThatDoNotFit) {
  const models::Model model = actors::testing::tiny_mlp();
  const schedules::Plan plan = plan_of(model, 1, {});
  const Tensor x = Tensor::zeros({2, 6});
  models::ParamSet missing;
  missing.add("0.weight", model.init_params(1).at("0.weight"));
  EXPECT_THROW(predict(model, plan, missing, x), PredictError);
  models::ParamSet wrong = model.init_params(1);
  wrong.add("9.weight", Tensor::zeros({2}));
  try {
    predict(model, plan, wrong, x);
    ADD_FAILURE() << "accepted an extra tensor";
  } catch (const PredictError& e) {
    EXPECT_NE(std::string(e.what()).find("'9.weight' is no parameter"), std::string::npos)
        << e.what();
  }
}

// A config's job: a live session, its finished checkpoint and the exported file agree.
TEST(Predict, LiveSessionCheckpointAndFileAgree) {
  TempDir dir;
  const fs::path checkpoints = dir.path() / "ck";
  const fs::path file = dir.path() / "model.safetensors";
  const std::string yaml =
      "model: {name: mlp, widths: [8, 16, 16, 16, 4]}\n"
      "data: {kind: teacher, samples: 256, seed: 1, hidden: 8}\n"
      "train:\n  minibatch: 16\n  steps: 4\n  optimizer: {kind: adamw, lr: 2.0e-3}\n"
      "  seed: 3\n  log_every: 1\n"
      "pipeline:\n  schedule: 1f1b\n  slices: 2\n  stages:\n"
      "    - {layers: \"0\", replicas: 2}\n    - {layers: \"1\"}\n    - {layers: \"2\"}\n"
      "    - {layers: \"3\"}\n";
  const Config c = parse_config(yaml, "test.yaml");
  Session session(c, SessionOptions{.checkpoint_dir = checkpoints});
  session.run();
  const models::ParamSet live = session.params();
  write_model_file(file, live, ModelFileInfo{c.model.describe(), 4, ""});
  const std::vector<int64_t> rows{0, 1, 2, 3, 4, 5, 6, 7, 8};
  const Tensor x = session.train_data().get(rows).inputs;
  const std::string name = c.model.describe();
  for (const models::ParamSet& w : {live, load_predict_weights(checkpoints, session.model(), name),
                                    load_predict_weights(file, session.model(), name)}) {
    for (const schedules::Plan& plan : {session.plan(), plan_of(session.model(), 1, {})}) {
      const PredictResult r = predict(session.model(), plan, w, x);
      EXPECT_TRUE(bitwise_equal(r.outputs, sliced_reference(session.model(), live, x, r.slices)));
    }
  }
  EXPECT_THROW(load_predict_weights(dir.path() / "nothing", session.model(), name), PredictError);
  EXPECT_THROW(load_predict_weights(file, session.model(), "mlp(widths=1-2)"), ModelFileError);
}

}  // namespace
}  // namespace tandem::train
