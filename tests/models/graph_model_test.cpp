// Graph models: layers that read any earlier output and the layers that merge (add, concat,
// multiply). A range of a graph (a stage) reads its range_inputs and gives its range_outputs;
// running the ranges one after the other, each tensor handed straight to the ranges that read
// it, must be the whole model's computation, and its gradients must be the derivatives of the
// model's function (checked against central differences).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "grad_check.hpp"
#include "models/graph_builder.hpp"
#include "models/layers/merge_layer.hpp"
#include "models/model.hpp"
#include "models/sim_clock.hpp"

namespace tandem::models {
namespace {

using testing::random_tensor;

GraphNode node(std::string name, std::string layer, std::vector<std::string> inputs = {},
               std::int64_t out = 0, std::string act = "none") {
  GraphNode n;
  n.name = std::move(name);
  n.layer = std::move(layer);
  n.inputs = std::move(inputs);
  n.out = out;
  n.activation = std::move(act);
  return n;
}

// x -> h1 -> h2 -> h3, a residual around h2..h3, a gate, a concat of a tensor from far back.
ModelSpec skip_graph() {
  ModelSpec spec;
  spec.name = "graph";
  spec.graph.input_shape = {6};
  spec.graph.nodes = {
      node("h1", "linear", {}, 8, "relu"),  // 0
      node("h2", "linear", {}, 8, "gelu"),  // 1
      node("h3", "linear", {}, 8),          // 2
      node("r", "add", {"h3", "h1"}),       // 3
      node("g", "linear", {"input"}, 8),    // 4
      node("m", "multiply", {"r", "g"}),    // 5
      node("c", "concat", {"m", "h2"}),     // 6
      node("n", "layer_norm"),              // 7
      node("out", "linear", {"n"}, 5),      // 8
  };
  return spec;
}

double rel_error(const Tensor& want, const Tensor& got) {
  if (want.shape() != got.shape()) return 1e30;
  const std::vector<float> a = want.to_float_vector();
  const std::vector<float> b = got.to_float_vector();
  double worst = 0, scale = 1e-12;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
  }
  return worst / scale;
}

// Runs the model cut at `cuts` (ascending, inside (0, n)), range after range, as stages would:
// each range reads its inputs from the outputs of the ranges before it; the backward runs the
// ranges in reverse, summing the gradients later ranges return for a tensor, the later range's
// first. Returns the logits and fills `grads` with the whole model's weight gradients.
Tensor run_in_ranges(const Model& m, const ParamSet& params, const Tensor& x, const Tensor& dlogits,
                     const std::vector<int>& cuts, ParamSet& grads, bool split) {
  std::vector<int> bounds{0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(m.num_layers());
  std::map<int, Tensor> value{{Model::kModelInput, x}};
  std::vector<std::vector<Saved>> saved;
  Context ctx{true, 3, 0};
  for (std::size_t r = 0; r + 1 < bounds.size(); ++r) {
    std::vector<Tensor> in;
    for (const int from : m.range_inputs(bounds[r], bounds[r + 1])) in.push_back(value.at(from));
    Model::RangeForward f = m.forward(ctx, params, in, bounds[r], bounds[r + 1]);
    const std::vector<int> outs = m.range_outputs(bounds[r], bounds[r + 1]);
    for (std::size_t k = 0; k < outs.size(); ++k) value[outs[k]] = f.outputs[k];
    saved.push_back(std::move(f.saved));
  }
  const Tensor logits = value.at(m.num_layers() - 1);
  std::map<int, Tensor> grad{{m.num_layers() - 1, dlogits}};
  for (std::size_t r = bounds.size() - 1; r-- > 0;) {
    std::vector<Tensor> dys;
    for (const int o : m.range_outputs(bounds[r], bounds[r + 1])) dys.push_back(grad.at(o));
    std::vector<Tensor> dx;
    if (split) {
      dx = m.backward_input(ctx, params, saved[r], dys, bounds[r], bounds[r + 1]);
      m.backward_weight(ctx, saved[r], bounds[r], bounds[r + 1], grads);
    } else {
      dx = m.backward(ctx, params, saved[r], dys, bounds[r], bounds[r + 1], grads);
    }
    const std::vector<int> reads = m.range_inputs(bounds[r], bounds[r + 1]);
    for (std::size_t k = 0; k < reads.size(); ++k) {
      if (reads[k] == Model::kModelInput) continue;
      EXPECT_TRUE(dx[k].defined()) << "range " << r << " input " << reads[k];
      auto it = grad.find(reads[k]);
      if (it == grad.end()) {
        grad[reads[k]] = dx[k];
      } else {
        Tensor sum = Tensor::empty(dx[k].shape());
        cpu_kernels().add(it->second.data<float>(), dx[k].data<float>(), sum.data<float>(),
                          sum.numel());
        it->second = sum;
      }
    }
  }
  return logits;
}

TEST(GraphModel, EdgesRangesAndShapes) {
  const Model m = build_graph(skip_graph());
  EXPECT_FALSE(m.is_chain());
  EXPECT_EQ(m.sources(3), (std::vector<int>{2, 0}));
  EXPECT_EQ(m.sources(4), (std::vector<int>{Model::kModelInput}));
  EXPECT_EQ(m.consumers(Model::kModelInput), (std::vector<int>{0, 4}));
  // Stage [3, 6) reads h3, h1 and the input's gate branch computes inside it.
  EXPECT_EQ(m.range_inputs(3, 6), (std::vector<int>{Model::kModelInput, 0, 2}));
  EXPECT_EQ(m.range_outputs(0, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(m.range_outputs(3, 7), (std::vector<int>{6}));
  EXPECT_EQ(m.range_outputs(7, 9), (std::vector<int>{8}));
  const std::vector<Shape> shapes = m.activation_shapes(4);
  EXPECT_EQ(shapes[6], (Shape{4, 16}));
  EXPECT_EQ(shapes[8], (Shape{4, 5}));
  EXPECT_EQ(m.input_shape(4), (Shape{4, 6}));
  EXPECT_EQ(m.input_shapes(4)[3], (Shape{4, 8}));  // r reads h3 first
  EXPECT_EQ(m.input_shapes(4)[4], (Shape{4, 6}));  // g reads the input
  // After layer 0: h1 and the input (read by g, layer 4); after 2: h1, h2, h3 and the input;
  // after 4: h2 (read by c), r and g; after 5: h2 and m; the last entry is the logits.
  const std::vector<double> cuts = m.cut_elements(1);
  EXPECT_EQ(cuts, (std::vector<double>{8 + 6, 8 + 8 + 6, 8 + 8 + 8 + 6, 6 + 8 + 8, 8 + 8 + 8, 8 + 8,
                                       16, 16, 5}));
}

TEST(GraphModel, RangesComposeToTheWholeModel) {
  const Model m = build_graph(skip_graph());
  const ParamSet params = m.init_params(5);
  const Tensor x = random_tensor({4, 6}, 9);
  const Tensor r = random_tensor({4, 5}, 10);
  ParamSet whole = params.zeros_like();
  const Tensor want = run_in_ranges(m, params, x, r, {}, whole, false);
  for (const std::vector<int>& cuts :
       std::vector<std::vector<int>>{{3}, {1, 3}, {2, 5, 7}, {1, 2, 3, 4, 5, 6, 7, 8}, {4, 6}}) {
    for (const bool split : {false, true}) {
      ParamSet grads = params.zeros_like();
      const Tensor got = run_in_ranges(m, params, x, r, cuts, grads, split);
      EXPECT_EQ(got.to_float_vector(), want.to_float_vector());  // forward: bit for bit
      for (std::int64_t i = 0; i < whole.size(); ++i) {
        EXPECT_LE(rel_error(whole[i], grads.at(whole.name(i))), 1e-6)
            << whole.name(i) << " with " << cuts.size() << " cuts, split " << split;
      }
    }
  }
}

// L(params, x) = sum(logits * r), in double.
double objective(const Model& m, const ParamSet& p, const Tensor& x, const Tensor& r) {
  Context ctx{true, 3, 0};
  const Tensor y = m.forward(ctx, p, std::span<const Tensor>(&x, 1), 0, m.num_layers()).y;
  const std::vector<float> a = y.to_float_vector();
  const std::vector<float> b = r.to_float_vector();
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TEST(GraphModel, GradientsAreTheDerivatives) {
  const Model m = build_graph(skip_graph());
  ParamSet params = m.init_params(5);
  const Tensor x = random_tensor({3, 6}, 9);
  const Tensor r = random_tensor({3, 5}, 10);
  ParamSet grads = params.zeros_like();
  (void)run_in_ranges(m, params, x, r, {2, 5}, grads, false);
  // One random direction per parameter tensor.
  for (std::int64_t i = 0; i < params.size(); ++i) {
    const Tensor v = random_tensor(params[i].shape(), 100 + static_cast<std::uint64_t>(i));
    const Tensor orig = params[i].clone();
    const double h = 1e-2;
    auto shifted = [&](double sign) {
      for (std::int64_t j = 0; j < v.numel(); ++j) {
        params[i].data<float>()[j] =
            orig.data<float>()[j] + static_cast<float>(sign * h) * v.data<float>()[j];
      }
      return objective(m, params, x, r);
    };
    const double numeric = (shifted(1) - shifted(-1)) / (2 * h);
    for (std::int64_t j = 0; j < v.numel(); ++j) params[i].data<float>()[j] = orig.data<float>()[j];
    double analytic = 0;
    for (std::int64_t j = 0; j < v.numel(); ++j) {
      analytic += static_cast<double>(grads[i].data<float>()[j]) * v.data<float>()[j];
    }
    EXPECT_NEAR(analytic, numeric, 2e-2 * std::max(1.0, std::abs(numeric))) << params.name(i);
  }
}

std::string build_error(const ModelSpec& spec) {
  try {
    (void)build_graph(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(GraphModel, BadGraphsAreRefusedNamingTheNode) {
  ModelSpec later = skip_graph();
  later.graph.nodes[1].inputs = {"h3"};  // reads a later node: a cycle
  EXPECT_EQ(
      build_error(later).rfind("model graph node 1 'h2': reads 'h3', which is not earlier", 0), 0u)
      << build_error(later);
  try {
    (void)build_graph(later);
  } catch (const GraphError& e) {
    EXPECT_EQ(e.node(), 1);
  }

  ModelSpec unknown = skip_graph();
  unknown.graph.nodes[3].inputs = {"h3", "nope"};
  EXPECT_NE(build_error(unknown).find("reads 'nope', which is neither an earlier node nor the "
                                      "input 'input'"),
            std::string::npos);

  ModelSpec self = skip_graph();
  self.graph.nodes[2].inputs = {"h3"};
  EXPECT_NE(build_error(self).find("not earlier"), std::string::npos);

  ModelSpec twice = skip_graph();
  twice.graph.nodes[2].name = "h1";
  EXPECT_NE(build_error(twice).find("the name is used twice"), std::string::npos);

  ModelSpec shapes = skip_graph();
  shapes.graph.nodes[3].inputs = {"h3", "input"};  // [8] + [6]
  EXPECT_NE(build_error(shapes).find("node 3 'r'"), std::string::npos) << build_error(shapes);
  EXPECT_NE(build_error(shapes).find("add needs equal shapes"), std::string::npos);

  ModelSpec dead = skip_graph();
  dead.graph.nodes[6].inputs = {"m", "h1"};  // h2 is read by h3 still; make g dead instead
  dead.graph.nodes[5].inputs = {"r", "r"};
  EXPECT_NE(build_error(dead).find("node 4 'g': its output is never read"), std::string::npos)
      << build_error(dead);

  ModelSpec kind = skip_graph();
  kind.graph.nodes[0].layer = "conv9d";
  EXPECT_NE(build_error(kind).find("unknown layer 'conv9d'"), std::string::npos);

  ModelSpec one = skip_graph();
  one.graph.nodes[3].inputs = {"h3"};
  EXPECT_NE(build_error(one).find("add needs at least two inputs"), std::string::npos);
}

// Inception joins its branches along the channels of [batch, C, H, W] images: each output plane
// is one input's plane, and the gradient goes back to the plane it came from.
TEST(GraphModel, ConcatAlongChannelsPlacesAndSplitsPlanes) {
  const ConcatLayer concat({1, 2}, 1);
  const Tensor a = random_tensor({2, 1, 2, 3}, 1);
  const Tensor b = random_tensor({2, 2, 2, 3}, 2);
  const std::vector<Tensor> xs{a, b};
  Context ctx;
  ForwardResult r = concat.forward_n(ctx, {}, xs);
  ASSERT_EQ(r.y.shape(), (Shape{2, 3, 2, 3}));
  const float* y = r.y.data<float>();
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 6; ++i) {
        const float want =
            c == 0 ? a.data<float>()[n * 6 + i] : b.data<float>()[n * 12 + (c - 1) * 6 + i];
        EXPECT_EQ(y[(n * 3 + c) * 6 + i], want) << n << " " << c << " " << i;
      }
    }
  }
  const std::vector<Tensor> dx = concat.backward_input_n(ctx, {}, r.saved, r.y, {true, true});
  ASSERT_EQ(dx[0].shape(), a.shape());
  ASSERT_EQ(dx[1].shape(), b.shape());
  for (std::int64_t i = 0; i < a.numel(); ++i)
    EXPECT_EQ(dx[0].data<float>()[i], a.data<float>()[i]);
  for (std::int64_t i = 0; i < b.numel(); ++i)
    EXPECT_EQ(dx[1].data<float>()[i], b.data<float>()[i]);
  // Other dimensions must agree; axis 0 is the batch.
  const std::vector<Shape> bad{{2, 1, 2, 3}, {2, 2, 2, 4}};
  EXPECT_THROW((void)concat.output_shape_n(bad), std::invalid_argument);
  EXPECT_THROW(ConcatLayer({1, 2}, 0), std::invalid_argument);
}

// The sim device runs a graph's shapes through every merge without data.
TEST(GraphModel, SimTensorsFlowThroughMerges) {
  const Model m = build_graph(skip_graph());
  const ParamSet params = m.init_params(5, Device::sim());
  SimClock clock(SimCosts::uniform(m.num_layers(), 1, 2, 1));
  Context ctx{true, 3, 0};
  ctx.sim_clock = &clock;
  const Tensor x = Tensor::empty({4, 6}, DType::f32, Device::sim());
  std::vector<Tensor> in{x};
  Model::RangeForward f = m.forward(ctx, params, in, 0, m.num_layers());
  EXPECT_EQ(f.y.shape(), (Shape{4, 5}));
  EXPECT_TRUE(f.y.device().is_sim());
  ParamSet grads = params.zeros_like();
  const Tensor dy = Tensor::empty({4, 5}, DType::f32, Device::sim());
  std::vector<Tensor> dys{dy};
  const std::vector<Tensor> dx = m.backward(ctx, params, f.saved, dys, 0, m.num_layers(), grads);
  ASSERT_EQ(dx.size(), 1u);
  EXPECT_FALSE(dx[0].defined());  // the model input has no gradient
  // Every layer's forward, every input gradient but those of the layers reading only the model
  // input (h1, g), and the weight-gradient charge of every one-input layer (merges have none).
  EXPECT_DOUBLE_EQ(clock.elapsed_ms(), 9 * 1 + 7 * 2 + 6 * 1);
}

}  // namespace
}  // namespace tandem::models
