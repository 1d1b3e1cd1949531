// Model zoo, parameter sets, train_step: shapes, determinism, slicing and fused updates.
#include "models/model.hpp"

#include <gtest/gtest.h>
#include <oneapi/tbb/task_arena.h>

#include <cmath>

#include "grad_check.hpp"
#include "models/loss.hpp"
#include "models/train_step.hpp"

namespace tandem::models {
namespace {

std::int64_t param_count(const Model& m) {
  std::int64_t n = 0;
  for (int i = 0; i < m.num_layers(); ++i) n += m.layer(i).param_numel();
  return n;
}

Tensor random_ids(const Shape& shape, std::int64_t vocab, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::i32);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7919 + seed * 104729) % vocab);
  }
  return t;
}

struct Batch {
  Tensor x, y;
};

Batch batch_for(const Model& m, std::int64_t b, std::uint64_t seed) {
  const ModelSpec& s = m.spec();
  if (s.name == "gpt")
    return {random_ids(m.input_shape(b), s.vocab, seed),
            random_ids(m.target_shape(b), s.vocab, seed + 1)};
  const std::int64_t classes = s.name == "mlp" ? s.widths.back() : s.classes;
  return {testing::random_tensor(m.input_shape(b), seed),
          random_ids(m.target_shape(b), classes, seed + 1)};
}

ModelSpec tiny_gpt(float dropout) {
  ModelSpec s = gpt_spec(2, 16, 2, 6, 11);
  s.dropout = dropout;
  return s;
}

TEST(Zoo, Vgg16HasTheReferenceParameterCount) {
  ModelSpec s;
  s.name = "vgg16";
  s.image_size = 224;
  s.classes = 1000;
  const Model m = Model::build(s);
  EXPECT_EQ(param_count(m), 138357544);  // torchvision vgg16
  EXPECT_EQ(m.num_layers(), 13 + 5 + 1 + 3);
  EXPECT_EQ(m.activation_shapes(2).back(), (Shape{2, 1000}));
}

TEST(Zoo, AlexNetHasTorchvisionsParameterCountAndASmallVariant) {
  ModelSpec s;
  s.name = "alexnet";
  s.image_size = 224;
  s.classes = 1000;
  const Model m = Model::build(s);
  EXPECT_EQ(param_count(m), 61100840);  // torchvision alexnet
  EXPECT_EQ(m.activation_shapes(1)[8], (Shape{1, 256 * 6 * 6}));
  s.image_size = 64;
  s.width_mult = 0.125;
  s.classes = 6;
  const Model small = Model::build(s);
  EXPECT_EQ(small.input_shape(2), (Shape{2, 3, 64, 64}));
  EXPECT_EQ(small.activation_shapes(2).back(), (Shape{2, 6}));
  s.image_size = 62;
  EXPECT_THROW(Model::build(s), std::invalid_argument);
}

// Trainable parameters less the convolutions' biases (torchvision's convolutions before a batch
// norm have none; the graph's conv2d always has one).
std::int64_t torchvision_count(const Model& m) {
  std::int64_t n = 0;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (const ParamSpec& p : m.layer(i).param_specs()) {
      const bool conv_bias = m.layer(i).kind() == "conv2d" && p.name == "bias";
      std::int64_t numel = 1;
      for (const std::int64_t d : p.shape) numel *= d;
      if (p.trainable && !conv_bias) n += numel;
    }
  }
  return n;
}

TEST(Zoo, ResNet50HasTorchvisionsParameterCountAndASmallVariant) {
  ModelSpec s;
  s.name = "resnet50";
  s.image_size = 224;
  s.classes = 1000;
  const Model m = Model::build(s);
  EXPECT_EQ(torchvision_count(m), 25557032);  // torchvision resnet50
  EXPECT_FALSE(m.is_chain());
  EXPECT_EQ(m.activation_shapes(1).back(), (Shape{1, 1000}));
  s.image_size = 32;
  s.width_mult = 1.0 / 16;
  s.classes = 6;
  const Model small = Model::build(s);
  EXPECT_EQ(small.num_layers(), m.num_layers());
  EXPECT_EQ(small.activation_shapes(2).back(), (Shape{2, 6}));
  s.image_size = 31;
  EXPECT_THROW(Model::build(s), std::invalid_argument);
}

TEST(Zoo, InceptionV3HasTorchvisionsParameterCountWithoutItsAuxiliaryHead) {
  ModelSpec s;
  s.name = "inception_v3";
  s.image_size = 299;
  s.classes = 1000;
  const Model m = Model::build(s);
  // torchvision's inception_v3 has 27,161,264 parameters, 3,326,696 of them in the auxiliary
  // classifier (trained only with its extra loss, so not part of the pipeline's model).
  EXPECT_EQ(torchvision_count(m), 27161264 - 3326696);
  const std::vector<Shape> shapes = m.activation_shapes(1);
  EXPECT_EQ(shapes[shapes.size() - 2], (Shape{1, 2048}));
  s.image_size = 75;
  s.width_mult = 1.0 / 16;
  s.classes = 6;
  const Model small = Model::build(s);
  EXPECT_EQ(small.activation_shapes(2).back(), (Shape{2, 6}));
  s.image_size = 74;
  EXPECT_THROW(Model::build(s), std::invalid_argument);
}

ModelSpec gnmt_spec(std::int64_t layers, std::int64_t d_model) {
  ModelSpec s;
  s.name = "gnmt";
  s.layers = layers;
  s.d_model = d_model;
  s.vocab = 11;
  s.seq_len = 6;
  return s;
}

std::vector<int> layers_of_kind(const Model& m, const std::string& kind) {
  std::vector<int> out;
  for (int i = 0; i < m.num_layers(); ++i) {
    if (m.layer(i).kind() == kind) out.push_back(i);
  }
  return out;
}

TEST(Zoo, GnmtIsHalfEncoderHalfDecoderWithAttentionIntoEveryLaterDecoderLayer) {
  const Model m = Model::build(gnmt_spec(8, 32));
  EXPECT_FALSE(m.is_chain());
  EXPECT_EQ(m.input_dtype(), DType::i32);
  EXPECT_EQ(m.input_shape(3), (Shape{3, 12}));  // source and target, packed
  EXPECT_EQ(m.activation_shapes(3).back(), (Shape{3, 6, 11}));
  EXPECT_EQ(m.target_shape(3), (Shape{3, 6}));
  // 2 embeddings, 8 LSTMs, 1 attention, 2 decoder concats, 2 + 2 residual adds, the head.
  EXPECT_EQ(m.num_layers(), 18);
  const std::vector<int> lstms = layers_of_kind(m, "lstm");
  ASSERT_EQ(lstms.size(), 8u);
  const std::vector<int> attention = layers_of_kind(m, "seq_attention");
  ASSERT_EQ(attention.size(), 1u);
  const int att = attention[0];
  EXPECT_EQ(m.layer(lstms[0]).describe(), "bilstm(32->16)");
  EXPECT_EQ(m.activation_shapes(1)[static_cast<std::size_t>(lstms[0])], (Shape{1, 6, 32}));
  EXPECT_EQ(layers_of_kind(m, "add").size(), 4u);
  // The attention reads the first decoder LSTM and the encoder's top output (the last add
  // before the target's embedding).
  EXPECT_EQ(m.sources(att), (std::vector<int>{lstms[4], 6}));
  EXPECT_EQ(m.layer(6).kind(), "add");
  // Every decoder LSTM after the first reads the attention's output: the second directly, the
  // later ones through concat(previous decoder output, attention).
  EXPECT_EQ(m.sources(lstms[5]), (std::vector<int>{att}));
  for (std::size_t k = 6; k < 8; ++k) {
    const std::vector<int> src = m.sources(lstms[k]);
    ASSERT_EQ(src.size(), 1u);
    EXPECT_EQ(m.layer(src[0]).kind(), "concat");
    EXPECT_EQ(m.sources(src[0]).back(), att);
    EXPECT_EQ(m.activation_shapes(1)[static_cast<std::size_t>(src[0])], (Shape{1, 6, 96}));
  }
  // GNMT-16: 8 + 8 layers, at the paper's width.
  ModelSpec big = gnmt_spec(16, 1024);
  big.vocab = 32000;
  big.seq_len = 50;
  const Model g16 = Model::build(big);
  EXPECT_EQ(layers_of_kind(g16, "lstm").size(), 16u);
  EXPECT_EQ(layers_of_kind(g16, "concat").size(), 6u);
  EXPECT_EQ(g16.activation_shapes(2).back(), (Shape{2, 50, 32000}));
  // Dropout adds nodes after the embeddings and before the head, nothing else.
  ModelSpec dropped = gnmt_spec(8, 32);
  dropped.dropout = 0.2f;
  EXPECT_EQ(Model::build(dropped).num_layers(), 18 + 3);
}

TEST(Zoo, S2vtReadsFramesThenWords) {
  ModelSpec s;
  s.name = "s2vt";
  s.d_model = 24;
  s.vocab = 9;
  s.seq_len = 4;
  s.frames = 5;
  s.frame_features = 7;
  const Model m = Model::build(s);
  EXPECT_EQ(m.input_dtype(), DType::f32);  // f32 frames and i32 words packed as f32
  EXPECT_EQ(m.input_shape(2), (Shape{2, 5 * 7 + 4}));
  ASSERT_EQ(m.num_layers(), 6);
  EXPECT_EQ(layers_of_kind(m, "lstm"), (std::vector<int>{1, 4}));
  // The frame LSTM's states and the word embeddings joined over time feed the second LSTM.
  EXPECT_EQ(m.sources(3), (std::vector<int>{1, 2}));
  EXPECT_EQ(m.sources(4), (std::vector<int>{3}));
  const std::vector<Shape> shapes = m.activation_shapes(2);
  EXPECT_EQ(shapes[1], (Shape{2, 5, 24}));
  EXPECT_EQ(shapes[3], (Shape{2, 9, 24}));
  EXPECT_EQ(shapes.back(), (Shape{2, 9, 9}));
  EXPECT_EQ(m.target_shape(2), (Shape{2, 9}));
}

TEST(Zoo, BadSequenceSpecsNameTheField) {
  auto message = [](const ModelSpec& s) {
    try {
      Model::build(s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(gnmt_spec(7, 32)).find("'layers'"), std::string::npos);
  EXPECT_NE(message(gnmt_spec(2, 32)).find("'layers'"), std::string::npos);
  EXPECT_NE(message(gnmt_spec(8, 33)).find("'d_model'"), std::string::npos);
  EXPECT_EQ(message(gnmt_spec(4, 8)), "");
  ModelSpec s;
  s.name = "s2vt";
  s.d_model = 8;
  s.vocab = 5;
  s.seq_len = 3;
  s.frame_features = 2;
  EXPECT_NE(message(s).find("'frames'"), std::string::npos);
}

TEST(Zoo, GptMatchesGpt2SmallPlusAnUntiedHead) {
  const Model m = Model::build(gpt_spec(12, 768, 12, 1024, 50257));
  // GPT-2 small (tied embeddings) has 124,439,808 parameters; the head adds its own matrix and
  // bias.
  EXPECT_EQ(param_count(m), 124439808 + 768 * 50257 + 50257);
  EXPECT_EQ(m.num_layers(), 1 + 12 + 2);
  EXPECT_EQ(m.input_dtype(), DType::i32);
  EXPECT_EQ(m.activation_shapes(3).back(), (Shape{3, 1024, 50257}));
}

TEST(Zoo, MlpAndSmallVggShapes) {
  const Model mlp = Model::build(mlp_spec({20, 16, 16, 4}));
  EXPECT_EQ(mlp.num_layers(), 3);
  EXPECT_EQ(mlp.activation_shapes(5).back(), (Shape{5, 4}));
  const Model vgg = Model::build(vgg16_small_spec(10));
  EXPECT_EQ(vgg.input_shape(4), (Shape{4, 3, 32, 32}));
  EXPECT_EQ(vgg.activation_shapes(4).back(), (Shape{4, 10}));
}

TEST(Zoo, BadSpecsNameTheField) {
  auto message = [](const ModelSpec& s) {
    try {
      Model::build(s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(mlp_spec({5})).find("widths"), std::string::npos);
  EXPECT_NE(message(gpt_spec(2, 10, 3, 4, 5)).find("heads"), std::string::npos);
  ModelSpec v = vgg16_small_spec();
  v.image_size = 40;
  EXPECT_NE(message(v).find("image_size"), std::string::npos);
  ModelSpec u;
  u.name = "resnet";
  EXPECT_NE(message(u).find("resnet"), std::string::npos);
}

TEST(Params, InitIsDeterministicAndStageIndependent) {
  const Model m = Model::build(tiny_gpt(0.0f));
  const ParamSet a = m.init_params(7);
  EXPECT_EQ(a.fingerprint(), m.init_params(7).fingerprint());
  EXPECT_NE(a.fingerprint(), m.init_params(8).fingerprint());
  // Stages initialised apart equal the whole model's parameters.
  ParamSet joined = m.init_params(7, 0, 2);
  joined.merge(m.init_params(7, 2, m.num_layers()));
  EXPECT_EQ(joined.names(), a.names());
  EXPECT_EQ(joined.fingerprint(), a.fingerprint());
  EXPECT_EQ(a.numel(), param_count(m));
  EXPECT_TRUE(a.contains("1.attn.qkv.weight"));
}

TEST(Params, CopiesShareAndClonesDoNot) {
  const Model m = Model::build(mlp_spec({4, 3, 2}));
  ParamSet a = m.init_params(1);
  ParamSet b = a;
  ParamSet c = a.clone();
  b[0].data<float>()[0] = 100.0f;
  EXPECT_EQ(a[0].data<float>()[0], 100.0f);
  EXPECT_NE(c[0].data<float>()[0], 100.0f);
  ParamSet sum = c.clone();
  sum.add_(c);
  sum.scale_(0.5f);
  EXPECT_EQ(sum.fingerprint(), c.fingerprint());
  EXPECT_THROW(a.add("0.weight", Tensor::zeros({1})), std::invalid_argument);
  const std::vector<std::string> wanted{"1.bias", "0.weight"};
  const ParamSet sub = a.subset(wanted);
  EXPECT_EQ(sub.names(), (std::vector<std::string>{"0.weight", "1.bias"}));  // the set's order
  EXPECT_TRUE(sub[0].shares_storage(a[0]));
  EXPECT_THROW(m.layer_params(sub, 1), std::out_of_range);  // 1.weight missing
  EXPECT_THROW(a.at("9.weight"), std::out_of_range);
}

class ZooTrainStep : public ::testing::TestWithParam<ModelSpec> {};

TEST_P(ZooTrainStep, IsBitwiseDeterministic) {
  const Model m = Model::build(GetParam());
  const ParamSet p = m.init_params(3);
  const Batch b = batch_for(m, 4, 5);
  const StepOutput s1 = train_step(m, p, b.x, b.y, 11);
  const StepOutput s2 = train_step(m, p, b.x, b.y, 11);
  EXPECT_TRUE(std::isfinite(s1.loss));
  EXPECT_EQ(s1.loss, s2.loss);
  EXPECT_EQ(s1.grads.fingerprint(), s2.grads.fingerprint());
  EXPECT_EQ(s1.grads.names(), p.names());
}

TEST_P(ZooTrainStep, IsDeterministicForEachWorkerCount) {
  // Reductions use fixed chunks, so only GEMM tiling depends on the number of workers: each
  // worker count is bit-reproducible, and counts differ only by rounding.
  const Model m = Model::build(GetParam());
  const ParamSet p = m.init_params(3);
  const Batch b = batch_for(m, 32, 5);  // big enough for GEMMs split across workers
  const StepOutput all = train_step(m, p, b.x, b.y, 11);
  StepOutput one1, one2;
  tbb::task_arena(1).execute([&] { one1 = train_step(m, p, b.x, b.y, 11); });
  tbb::task_arena(1).execute([&] { one2 = train_step(m, p, b.x, b.y, 11); });
  EXPECT_EQ(one1.loss, one2.loss);
  EXPECT_EQ(one1.grads.fingerprint(), one2.grads.fingerprint());
  EXPECT_NEAR(all.loss, one1.loss, 1e-5 * std::abs(all.loss));
  for (std::int64_t i = 0; i < p.size(); ++i) {
    const std::vector<float> g1 = all.grads[i].to_float_vector();
    const std::vector<float> g2 = one1.grads[i].to_float_vector();
    double worst = 0, scale = 1e-6;
    for (std::size_t k = 0; k < g1.size(); ++k) {
      worst = std::max(worst, static_cast<double>(std::abs(g1[k] - g2[k])));
      scale = std::max(scale, static_cast<double>(std::abs(g1[k])));
    }
    EXPECT_LE(worst, 1e-4 * scale) << p.name(i);
  }
}

TEST_P(ZooTrainStep, SlicesAddUpToTheMinibatch) {
  // A pipeline runs a minibatch as slices and sums their gradients; with the loss scaled by the
  // whole minibatch and sample offsets in the context (dropout), that is the minibatch gradient.
  const Model m = Model::build(GetParam());
  const ParamSet p = m.init_params(3);
  const std::int64_t batch = 6;
  const Batch b = batch_for(m, batch, 5);
  const StepOutput whole = train_step(m, p, b.x, b.y, 11);
  ParamSet grads = p.zeros_like();
  double loss_sum = 0;
  const float scale = 1.0f / static_cast<float>(b.y.numel());
  for (const auto& [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, 2}, {2, 3}, {3, 6}}) {
    const Context ctx{true, 11, begin};
    auto fwd = m.forward(ctx, p, b.x.slice(begin, end), 0, m.num_layers());
    const LossResult l = softmax_cross_entropy(fwd.y, b.y.slice(begin, end), true, scale);
    loss_sum += l.loss_sum;
    m.backward(ctx, p, fwd.saved, l.dlogits, 0, m.num_layers(), false, grads, 1.0f, 1.0f);
  }
  EXPECT_NEAR(loss_sum / static_cast<double>(b.y.numel()), whole.loss, 1e-5);
  for (std::int64_t i = 0; i < p.size(); ++i) {
    const std::vector<float> g1 = whole.grads[i].to_float_vector();
    const std::vector<float> g2 = grads[i].to_float_vector();
    double worst = 0, scale_max = 1e-6;
    for (std::size_t k = 0; k < g1.size(); ++k) {
      worst = std::max(worst, static_cast<double>(std::abs(g1[k] - g2[k])));
      scale_max = std::max(scale_max, static_cast<double>(std::abs(g1[k])));
    }
    EXPECT_LE(worst, 1e-4 * scale_max) << p.name(i);
  }
}

TEST_P(ZooTrainStep, FusedSgdEqualsGradientsThenStep) {
  const Model m = Model::build(GetParam());
  const Batch b = batch_for(m, 4, 5);
  const OptimizerSpec spec{.kind = "sgd", .lr = 0.05, .weight_decay = 0.01};
  ParamSet fused = m.init_params(3);
  ParamSet plain = fused.clone();
  auto opt1 = make_optimizer(spec);
  auto opt2 = make_optimizer(spec);
  const StepOutput a = train_step(m, fused, *opt1, b.x, b.y, 11);
  EXPECT_TRUE(a.grads.empty());  // written straight into the weights
  const StepOutput g = train_step(m, static_cast<const ParamSet&>(plain), b.x, b.y, 11);
  opt2->step(plain, g.grads);
  EXPECT_EQ(a.loss, g.loss);
  EXPECT_EQ(opt1->steps(), 1);
  for (std::int64_t i = 0; i < plain.size(); ++i) {
    const std::vector<float> x = fused[i].to_float_vector();
    const std::vector<float> y = plain[i].to_float_vector();
    for (std::size_t k = 0; k < x.size(); ++k)
      ASSERT_NEAR(x[k], y[k], 1e-6 * (1 + std::abs(y[k]))) << plain.name(i);
  }
  // A kept version is never written by the fused path.
  const ParamSet kept = fused;
  const std::uint64_t before = kept.fingerprint();
  train_step(m, fused, *opt1, b.x, b.y, 12);
  EXPECT_EQ(kept.fingerprint(), before);
}

INSTANTIATE_TEST_SUITE_P(Models, ZooTrainStep,
                         ::testing::Values(mlp_spec({12, 10, 8, 5}),
                                           // Large enough for GEMMs split across workers.
                                           mlp_spec({256, 512, 256, 10}), tiny_gpt(0.2f),
                                           [] {
                                             ModelSpec s = vgg16_small_spec(7);
                                             s.width_mult = 1.0 / 16;
                                             s.dropout = 0.3f;
                                             return s;
                                           }()),
                         [](const auto& test_info) {
                           return test_info.param.name + std::to_string(test_info.index);
                         });

TEST(TrainStep, EvaluateMatchesTrainingLossWithoutDropout) {
  const Model m = Model::build(tiny_gpt(0.0f));
  const ParamSet p = m.init_params(2);
  const Batch b = batch_for(m, 3, 4);
  const EvalOutput e = evaluate(m, p, b.x, b.y);
  const StepOutput s = train_step(m, p, b.x, b.y, 0);
  EXPECT_EQ(e.loss, s.loss);
  EXPECT_EQ(e.correct, s.correct);
  EXPECT_EQ(e.count, 3 * 6);
  EXPECT_THROW(evaluate(m, p, b.y.reshape({-1}), b.y), std::invalid_argument);
}

TEST(TrainStep, LearningReducesTheLoss) {
  // Memorise a fixed batch: a short sanity check that gradients point downhill end to end.
  for (const ModelSpec& spec : {mlp_spec({10, 32, 4}), tiny_gpt(0.0f)}) {
    const Model m = Model::build(spec);
    ParamSet p = m.init_params(1);
    const Batch b = batch_for(m, 8, 2);
    auto opt = make_optimizer({.kind = "adamw", .lr = 0.01});
    const float first = train_step(m, p, *opt, b.x, b.y, 0).loss;
    float last = first;
    for (int i = 0; i < 30; ++i) last = train_step(m, p, *opt, b.x, b.y, 0).loss;
    EXPECT_LT(last, 0.5f * first) << spec.name;
  }
}

}  // namespace
}  // namespace tandem::models
