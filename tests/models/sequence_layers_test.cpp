// The sequence layers (models/layers/lstm.hpp, seq_attention.hpp): values against a scalar
// LSTM written here, gradients against finite differences, B then W against the fused backward
// bit for bit, saved state sliced by samples, and a graph whose two-input attention has weights.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "grad_check.hpp"
#include "models/graph_builder.hpp"
#include "models/layers/lstm.hpp"
#include "models/layers/seq_attention.hpp"
#include "models/model.hpp"
#include "two_inputs.hpp"

namespace tandem::models {
namespace {

using testing::check_gradients;
using testing::GradCheckReport;
using testing::random_params;
using testing::random_tensor;
using testing::split_analytic;
using testing::TwoInputs;

double sigmoid(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}

// torch.nn.LSTM's equations one scalar at a time, in double: y [b, T, dirs * H].
std::vector<double> reference_lstm(const std::vector<float>& x, const std::vector<Tensor>& params,
                                   std::int64_t batch, std::int64_t steps, std::int64_t in,
                                   std::int64_t hidden, int dirs) {
  const std::int64_t width = dirs * hidden;
  std::vector<double> y(static_cast<std::size_t>(batch * steps * width));
  for (int d = 0; d < dirs; ++d) {
    const std::vector<float> wih = params[3 * static_cast<std::size_t>(d)].to_float_vector();
    const std::vector<float> whh = params[3 * static_cast<std::size_t>(d) + 1].to_float_vector();
    const std::vector<float> bias = params[3 * static_cast<std::size_t>(d) + 2].to_float_vector();
    for (std::int64_t b = 0; b < batch; ++b) {
      std::vector<double> h(static_cast<std::size_t>(hidden), 0.0);
      std::vector<double> c(static_cast<std::size_t>(hidden), 0.0);
      for (std::int64_t s = 0; s < steps; ++s) {
        const std::int64_t t = d == 0 ? s : steps - 1 - s;
        std::vector<double> z(static_cast<std::size_t>(4 * hidden));
        for (std::int64_t r = 0; r < 4 * hidden; ++r) {
          double v = bias[static_cast<std::size_t>(r)];
          for (std::int64_t j = 0; j < in; ++j) {
            v += static_cast<double>(wih[static_cast<std::size_t>(r * in + j)]) *
                 x[static_cast<std::size_t>((b * steps + t) * in + j)];
          }
          for (std::int64_t j = 0; j < hidden; ++j) {
            v += static_cast<double>(whh[static_cast<std::size_t>(r * hidden + j)]) *
                 h[static_cast<std::size_t>(j)];
          }
          z[static_cast<std::size_t>(r)] = v;
        }
        for (std::int64_t j = 0; j < hidden; ++j) {
          const auto at = [&](std::int64_t gate) {
            return z[static_cast<std::size_t>(gate * hidden + j)];
          };
          const double ig = sigmoid(at(0));
          const double fg = sigmoid(at(1));
          const double gg = std::tanh(at(2));
          const double og = sigmoid(at(3));
          auto& cj = c[static_cast<std::size_t>(j)];
          cj = fg * cj + ig * gg;
          h[static_cast<std::size_t>(j)] = og * std::tanh(cj);
        }
        for (std::int64_t j = 0; j < hidden; ++j) {
          y[static_cast<std::size_t>((b * steps + t) * width + d * hidden + j)] =
              h[static_cast<std::size_t>(j)];
        }
      }
    }
  }
  return y;
}

void expect_matches_reference(bool bidirectional) {
  const std::int64_t batch = 3, steps = 5, in = 4, hidden = 6;
  const Lstm lstm(in, hidden, bidirectional);
  const std::vector<Tensor> params = random_params(lstm, 3, 0.6f);
  const Tensor x = random_tensor({batch, steps, in}, 4);
  const Tensor y = lstm.forward(Context{}, params, x).y;
  const int dirs = bidirectional ? 2 : 1;
  ASSERT_EQ(y.shape(), (Shape{batch, steps, dirs * hidden}));
  const std::vector<double> want =
      reference_lstm(x.to_float_vector(), params, batch, steps, in, hidden, dirs);
  const std::vector<float> got = y.to_float_vector();
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 2e-5) << lstm.describe() << " element " << i;
  }
}

TEST(SequenceLayers, LstmMatchesAScalarReference) {
  expect_matches_reference(false);
}

TEST(SequenceLayers, BidirectionalLstmMatchesAScalarReference) {
  expect_matches_reference(true);
}

TEST(SequenceLayers, LstmShapesParametersAndErrors) {
  const Lstm lstm(4, 6, true);
  EXPECT_EQ(lstm.output_shape({2, 7, 4}), (Shape{2, 7, 12}));
  const std::vector<ParamSpec> specs = lstm.param_specs();
  ASSERT_EQ(specs.size(), 6u);
  EXPECT_EQ(specs[0].name, "weight_ih");
  EXPECT_EQ(specs[0].shape, (Shape{24, 4}));
  EXPECT_EQ(specs[1].shape, (Shape{24, 6}));
  EXPECT_EQ(specs[2].shape, (Shape{24}));
  EXPECT_EQ(specs[4].name, "weight_hh_reverse");
  EXPECT_EQ(specs[1].init, Init::uniform_fan_in);
  EXPECT_EQ(specs[1].fan_in, 6);  // U(-1/sqrt(H), 1/sqrt(H)) as PyTorch
  try {
    (void)lstm.output_shape({2, 7, 5});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bilstm(4->6)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 7, 5]"), std::string::npos) << e.what();
  }
  const SeqAttention att(4, 6);
  const std::vector<Shape> in{{2, 3, 4}, {2, 5, 6}};
  EXPECT_EQ(att.output_shape_n(in), (Shape{2, 3, 10}));
  const std::vector<Shape> bad{{2, 3, 4}, {2, 5, 5}};
  EXPECT_THROW((void)att.output_shape_n(bad), std::invalid_argument);
  const std::vector<Shape> batches{{2, 3, 4}, {3, 5, 6}};
  EXPECT_THROW((void)att.output_shape_n(batches), std::invalid_argument);
}

struct Case {
  std::string name;
  std::shared_ptr<const Layer> layer;
  Tensor x;
};

std::vector<Case> cases() {
  return {
      {"lstm", std::make_shared<Lstm>(3, 4), random_tensor({2, 5, 3}, 11)},
      {"bilstm", std::make_shared<Lstm>(3, 4, true), random_tensor({2, 4, 3}, 12)},
      {"bilstm_one_step", std::make_shared<Lstm>(3, 2, true), random_tensor({3, 1, 3}, 13)},
      {"seq_attention",
       std::make_shared<TwoInputs>(std::make_shared<SeqAttention>(4, 3), Shape{3, 4}, Shape{5, 3}),
       random_tensor({2, 3 * 4 + 5 * 3}, 14)},
  };
}

TEST(SequenceLayers, GradientsMatchFiniteDifferences) {
  for (const Case& c : cases()) {
    for (const bool split : {false, true}) {
      const GradCheckReport r =
          split ? check_gradients(*c.layer, Context{}, random_params(*c.layer, 21), c.x, {},
                                  split_analytic)
                : check_gradients(*c.layer, Context{}, random_params(*c.layer, 21), c.x);
      EXPECT_TRUE(r.ok()) << c.name << (split ? " (B then W)" : " (fused)") << "\n" << r.str();
    }
  }
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_float_vector() == b.to_float_vector();
}

TEST(SequenceLayers, InputThenWeightEqualsFusedBitForBit) {
  const Context ctx;
  for (const Case& c : cases()) {
    const std::vector<Tensor> params = random_params(*c.layer, 31);
    const Tensor dy = random_tensor(c.layer->output_shape(c.x.shape()), 32);
    const ForwardResult f = c.layer->forward(ctx, params, c.x);
    Saved fused_state = f.saved;
    const BackwardResult fused = c.layer->backward(ctx, params, fused_state, dy);
    Saved split_state = f.saved;
    const Tensor dx = c.layer->backward_input(ctx, params, split_state, dy);
    const std::vector<Tensor> grads = c.layer->backward_weight(ctx, split_state, dy);
    EXPECT_TRUE(same_bits(dx, fused.dx)) << c.name;
    ASSERT_EQ(grads.size(), fused.grads.size());
    for (std::size_t i = 0; i < grads.size(); ++i) {
      EXPECT_TRUE(same_bits(grads[i], fused.grads[i])) << c.name << " gradient " << i;
    }
    // A second B on the same state replaces what the first appended.
    (void)c.layer->backward_input(ctx, params, split_state, dy);
    const std::vector<Tensor> again = c.layer->backward_weight(ctx, split_state, dy);
    for (std::size_t i = 0; i < grads.size(); ++i) {
      EXPECT_TRUE(same_bits(again[i], grads[i])) << c.name << " gradient " << i;
    }
    Saved empty;
    EXPECT_THROW((void)c.layer->backward_weight(ctx, f.saved, dy), std::invalid_argument)
        << c.name << ": W before B";
    EXPECT_THROW((void)c.layer->backward_input(ctx, params, empty, dy), std::invalid_argument)
        << c.name << ": B without forward state";
  }
}

GraphNode node(std::string name, std::string layer, std::vector<std::string> inputs = {}) {
  GraphNode n;
  n.name = std::move(name);
  n.layer = std::move(layer);
  n.inputs = std::move(inputs);
  return n;
}

GraphNode lstm_node(std::string name, std::int64_t hidden, bool bidirectional,
                    std::vector<std::string> inputs = {}) {
  GraphNode n = node(std::move(name), "lstm", std::move(inputs));
  n.hidden = hidden;
  n.bidirectional = bidirectional;
  return n;
}

// x [6, 3] per sample -> bidirectional encoder (width 8) -> decoder LSTM (width 5) attending
// over the encoder -> linear 4.
ModelSpec attention_graph() {
  ModelSpec spec;
  spec.name = "graph";
  spec.graph.input_shape = {6, 3};
  GraphNode out = node("out", "linear");
  out.out = 4;
  spec.graph.nodes = {lstm_node("enc", 4, true), lstm_node("dec", 5, false),
                      node("att", "seq_attention", {"dec", "enc"}), out};
  return spec;
}

Context train_ctx(std::int64_t sample_begin = 0) {
  return Context{true, 7, sample_begin};
}

// L = sum(y * r) in double.
double objective(const Model& m, const ParamSet& p, const Tensor& x, const Tensor& r) {
  const Tensor y = m.forward(train_ctx(), p, x, 0, m.num_layers()).y;
  const std::vector<float> a = y.to_float_vector();
  const std::vector<float> b = r.to_float_vector();
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// A layer of two inputs with a weight in a graph: Model hands it its parameters and a gradient
// sink, fused and split (B, then W) backward agree bit for bit, and its weight's gradient is
// the derivative of the model's output.
TEST(SequenceLayers, GraphAttentionWithWeightsTrainsThroughTheModel) {
  const Model m = build_graph(attention_graph());
  ASSERT_EQ(m.num_layers(), 4);
  EXPECT_EQ(m.layer(2).kind(), "seq_attention");
  EXPECT_EQ(m.sources(2), (std::vector<int>{1, 0}));
  EXPECT_EQ(m.activation_shapes(2)[2], (Shape{2, 6, 5 + 8}));
  const ParamSet p = m.init_params(3);
  const std::string w = m.param_name(2, "weight");
  ASSERT_EQ(p.at(w).shape(), (Shape{5, 8}));
  const Tensor x = random_tensor({2, 6, 3}, 4);
  const Tensor r = random_tensor({2, 6, 4}, 5);
  const int n = m.num_layers();

  Model::RangeForward f = m.forward(train_ctx(), p, x, 0, n);
  ParamSet fused = p.zeros_like();
  (void)m.backward(train_ctx(), p, f.saved, r, 0, n, false, fused);

  Model::RangeForward g = m.forward(train_ctx(), p, x, 0, n);
  ParamSet split = p.zeros_like();
  (void)m.backward_input(train_ctx(), p, g.saved, r, 0, n, false);
  m.backward_weight(train_ctx(), g.saved, 0, n, split);
  for (std::int64_t i = 0; i < p.size(); ++i) {
    EXPECT_TRUE(same_bits(fused[i], split.at(fused.name(i)))) << fused.name(i);
  }

  // Central differences on a few coordinates of the attention's weight and the encoder's.
  for (const std::string& name : {w, m.param_name(0, "weight_hh_reverse")}) {
    const std::vector<float> grad = fused.at(name).to_float_vector();
    double scale = 1e-2;
    for (const float v : grad) scale = std::max(scale, static_cast<double>(std::abs(v)));
    for (const std::int64_t at : {0, 7, 13}) {
      const double h = 1e-2;
      auto shifted = [&](double by) {
        ParamSet q = p.clone();
        q.at(name).data<float>()[at] += static_cast<float>(by);
        return objective(m, q, x, r);
      };
      const double numeric = (shifted(h) - shifted(-h)) / (2 * h);
      EXPECT_NEAR(grad[static_cast<std::size_t>(at)], numeric, 2e-3 * scale)
          << name << "[" << at << "]";
    }
  }
}

// A forward over 4 samples cut by Model::slice_saved into [1, 3) gives the backward of a forward
// over those samples alone.
TEST(SequenceLayers, SavedStateSlicesBySamples) {
  const Model m = build_graph(attention_graph());
  const int n = m.num_layers();
  const ParamSet p = m.init_params(8);
  const Tensor x = random_tensor({4, 6, 3}, 9);
  const Tensor r = random_tensor({4, 6, 4}, 10);
  for (const bool split : {false, true}) {
    Model::RangeForward whole = m.forward(train_ctx(), p, x, 0, n);
    std::vector<Saved> sliced = m.slice_saved(whole.saved, 0, n, 4, 1, 3);
    Model::RangeForward part = m.forward(train_ctx(1), p, x.slice(1, 3), 0, n);
    ParamSet got = p.zeros_like();
    ParamSet want = p.zeros_like();
    const Tensor dy = r.slice(1, 3);
    if (split) {
      (void)m.backward_input(train_ctx(1), p, sliced, dy, 0, n, false);
      m.backward_weight(train_ctx(1), sliced, 0, n, got);
    } else {
      (void)m.backward(train_ctx(1), p, sliced, dy, 0, n, false, got);
    }
    (void)m.backward(train_ctx(1), p, part.saved, dy, 0, n, false, want);
    for (std::int64_t i = 0; i < p.size(); ++i) {
      const std::vector<float> a = want[i].to_float_vector();
      const std::vector<float> b = got.at(want.name(i)).to_float_vector();
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t j = 0; j < a.size(); ++j) {
        EXPECT_NEAR(a[j], b[j], 1e-5) << want.name(i) << "[" << j << "] split " << split;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::models
