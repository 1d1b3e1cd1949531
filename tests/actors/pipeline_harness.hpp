#pragma once
// Shared by the pipeline tests: small models, deterministic minibatches, plans, the
// single-device reference, and a relative comparison of weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/step_seed.hpp"
#include "models/input_layout.hpp"
#include "models/loss.hpp"
#include "models/model.hpp"
#include "models/train_step.hpp"
#include "runtime/manual_scheduler.hpp"
#include "runtime/scheduler.hpp"
#include "schedules/plan.hpp"

namespace tandem::actors::testing {

inline models::Model tiny_mlp(const std::string& loss = "cross_entropy") {
  // 8 layers, so that 4 stages of 2 chunks each still get a layer.
  models::ModelSpec s = models::mlp_spec({6, 12, 12, 12, 12, 12, 12, 12, 5});
  s.loss = loss;
  return models::Model::build(s);
}

inline models::Model tiny_gpt(float dropout = 0.1f) {
  models::ModelSpec s = models::gpt_spec(5, 16, 2, 6, 11);  // 8 layers
  s.dropout = dropout;
  return models::Model::build(s);
}

// 12 layers with edges that skip stages: cut into 4 stages ([0,3) [3,6) [6,9) [9,12)), layer 1's
// output and the sum of layer 4 jump over two cuts, the model input is read on stage 2, and
// add, multiply and concat merge.
inline models::Model tiny_graph(const std::string& loss = "cross_entropy") {
  models::ModelSpec s;
  s.name = "graph";
  s.loss = loss;
  s.graph.input_shape = {6};
  auto node = [](std::string name, std::string layer, std::vector<std::string> inputs = {},
                 std::int64_t out = 0, std::string act = "none") {
    models::GraphNode n;
    n.name = std::move(name);
    n.layer = std::move(layer);
    n.inputs = std::move(inputs);
    n.out = out;
    n.activation = std::move(act);
    return n;
  };
  s.graph.nodes = {
      node("h0", "linear", {}, 12, "relu"), node("h1", "linear", {}, 12, "relu"),
      node("h2", "linear", {}, 12, "gelu"), node("h3", "linear", {}, 12),
      node("r1", "add", {"h3", "h0"}),      node("h5", "linear", {}, 12, "relu"),
      node("g", "linear", {"input"}, 12),   node("m", "multiply", {"h5", "g"}),
      node("c", "concat", {"m", "h1"}),     node("h9", "linear", {}, 12, "relu"),
      node("r2", "add", {"h9", "r1"}),      node("out", "linear", {}, 5),
  };
  return models::Model::build(s);
}

// A sequence-to-sequence toy with two named token inputs (packed, models/input_layout.hpp):
// 8 layers, on 4 stages [0,2) [2,4) [4,6) [6,8): the target sequence's embedding reads the model
// input on stage 1, and the encoder's h1 jumps over two cuts to stage 3.
inline models::Model tiny_seq2seq() {
  models::ModelSpec s;
  s.name = "graph";
  s.graph.inputs = {{"src", {6}, "i32"}, {"tgt", {6}, "i32"}};
  auto node = [](std::string name, std::string layer, std::vector<std::string> inputs,
                 std::int64_t out = 0, std::string act = "none", std::int64_t vocab = 0) {
    models::GraphNode n;
    n.name = std::move(name);
    n.layer = std::move(layer);
    n.inputs = std::move(inputs);
    n.out = out;
    n.activation = std::move(act);
    n.vocab = vocab;
    return n;
  };
  s.graph.nodes = {
      node("es", "embedding", {"src"}, 12, "none", 11),
      node("h1", "linear", {}, 12, "relu"),
      node("h2", "linear", {}, 12),
      node("et", "embedding", {"tgt"}, 12, "none", 11),
      node("a", "add", {"h2", "et"}),
      node("h5", "linear", {}, 12, "gelu"),
      node("r", "add", {"h5", "h1"}),
      node("out", "linear", {}, 11),
  };
  return models::Model::build(s);
}

inline std::uint64_t mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Minibatch b of `samples` samples for `model`, the same on every call. `seq_lens` (gpt only)
// cuts it into pieces of equal sample counts with those sequence lengths.
inline MinibatchData make_minibatch(const models::Model& model, std::int64_t samples,
                                    std::int64_t b, std::vector<std::int64_t> seq_lens = {}) {
  const auto& spec = model.spec();
  auto value = [&](std::uint64_t i) { return mix(static_cast<std::uint64_t>(b) * 1000003ULL + i); };
  if (spec.name == "gpt") {
    if (seq_lens.empty()) seq_lens = {spec.seq_len};
    MinibatchData d;
    const auto pieces = static_cast<std::int64_t>(seq_lens.size());
    std::int64_t first = 0;
    for (std::int64_t p = 0; p < pieces; ++p) {
      const std::int64_t n = (p + 1) * samples / pieces - p * samples / pieces;
      const std::int64_t t = seq_lens[static_cast<std::size_t>(p)];
      std::vector<std::int32_t> in(static_cast<std::size_t>(n * t)), tg(in.size());
      for (std::size_t i = 0; i < in.size(); ++i) {
        in[i] = static_cast<std::int32_t>(value(first * 1000 + i) % spec.vocab);
        tg[i] = static_cast<std::int32_t>(value(first * 1000 + i + 777) % spec.vocab);
      }
      d.pieces.push_back(
          {{first, first + n}, Tensor::from_vector(in, {n, t}), Tensor::from_vector(tg, {n, t})});
      first += n;
    }
    return d;
  }
  if (spec.name == "graph" && spec.graph.inputs.size() > 1) {
    // Token inputs of the graph's vocabulary (its first embedding's), targets per position.
    const std::int64_t vocab = spec.graph.nodes.front().vocab;
    std::vector<models::NamedTensor> named;
    std::uint64_t salt = 0;
    for (const models::GraphInput& in : spec.graph.inputs) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(samples * in.shape.front()));
      for (auto& id : ids) id = static_cast<std::int32_t>(value(salt++) % vocab);
      named.emplace_back(in.name, Tensor::from_vector(ids, {samples, in.shape.front()}));
    }
    const Shape ts = model.target_shape(samples);
    std::vector<std::int32_t> tg(static_cast<std::size_t>(shape_numel(ts)));
    for (auto& t : tg) t = static_cast<std::int32_t>(value(salt++ + 99991) % vocab);
    return MinibatchData::whole(models::InputLayout::of(spec.graph).pack(named),
                                Tensor::from_vector(tg, ts));
  }
  // Features of the model's input shape (an mlp's rows, a graph's or an image model's
  // samples), a class per sample of its logits.
  const Shape in_shape = model.input_shape(samples);
  const std::int64_t classes = model.activation_shapes(1).back().back();
  std::vector<float> in(static_cast<std::size_t>(shape_numel(in_shape)));
  std::vector<std::int32_t> tg(static_cast<std::size_t>(samples));
  for (std::size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<float>(value(i) % 2001) / 1000.0f - 1.0f;
  }
  if (model.target_dtype() == DType::f32) {
    // Regression targets in [0, 1], which suit bce_with_logits as well as mse.
    std::vector<float> ft(static_cast<std::size_t>(samples * classes));
    for (std::size_t i = 0; i < ft.size(); ++i) {
      ft[i] = static_cast<float>(value(i + 99991) % 1001) / 1000.0f;
    }
    return MinibatchData::whole(Tensor::from_vector(in, in_shape),
                                Tensor::from_vector(ft, {samples, classes}));
  }
  for (std::size_t i = 0; i < tg.size(); ++i) {
    tg[i] = static_cast<std::int32_t>(value(i + 99991) % static_cast<std::uint64_t>(classes));
  }
  return MinibatchData::whole(Tensor::from_vector(in, in_shape),
                              Tensor::from_vector(tg, {samples}));
}

// A flush schedule for a model's correctness cases: stages (one entry of `replicas` each), slices,
// chunks, UMPIPE's compositions.
struct FlushCase {
  std::string name;
  schedules::ScheduleKind kind;
  std::vector<int> replicas;
  int slices;
  int chunks = 1;
  bool relay = false;  // graph: skip edges relayed by the stages in between
  std::vector<std::vector<std::int64_t>> fwd = {}, bwd = {};
};

inline std::ostream& operator<<(std::ostream& os, const FlushCase& c) {
  return os << c.name;
}

inline schedules::ScheduleParams flush_params(const FlushCase& c, std::int64_t minibatch,
                                              std::int64_t minibatches) {
  schedules::ScheduleParams p;
  p.kind = c.kind;
  p.stages = static_cast<int>(c.replicas.size());
  p.replicas = c.replicas;
  p.slices = c.slices;
  p.minibatch_size = minibatch;
  p.chunks = c.chunks;
  p.minibatches = minibatches;
  p.forward_slices = c.fwd;
  p.backward_slices = c.bwd;
  return p;
}

// Stages cut the model's layers as evenly as possible.
inline schedules::Plan even_plan(const models::Model& model, schedules::ScheduleParams params,
                                 const std::string& device = "cpu") {
  std::vector<schedules::StagePlan> stages;
  const int n = model.num_layers();
  const int p = params.stages;
  for (int s = 0; s < p; ++s) {
    schedules::StagePlan sp;
    sp.layers = {s * n / p, (s + 1) * n / p};
    sp.replicas.assign(static_cast<std::size_t>(params.replicas_of(s)),
                       schedules::Placement{"", device});
    stages.push_back(sp);
  }
  return schedules::Plan::make(stages, params);
}

// Gradients of the mean loss over every piece of `data`, at `params`, with the pipeline's
// dropout seed for minibatch b.
inline models::ParamSet reference_grads(const models::Model& model, const models::ParamSet& params,
                                        const MinibatchData& data, std::uint64_t seed,
                                        std::int64_t b, double* loss = nullptr) {
  models::ParamSet grads = params.zeros_like();
  const float scale = 1.0f / static_cast<float>(data.loss_rows());
  double loss_sum = 0;
  for (const auto& piece : data.pieces) {
    models::Context ctx;
    ctx.training = true;
    ctx.seed = step_seed(seed, b);
    ctx.sample_begin = piece.samples.begin;
    auto fwd = model.forward(ctx, params, piece.inputs, 0, model.num_layers());
    auto l = model.loss().compute(ctx, fwd.y, piece.targets, true, scale);
    loss_sum += l.loss_sum;
    model.backward(ctx, params, fwd.saved, l.dlogits, 0, model.num_layers(), false, grads, 1.0f,
                   1.0f);
  }
  if (loss != nullptr) *loss = loss_sum / static_cast<double>(data.loss_rows());
  models::sum_tied_copies(models::cpu_kernels(), model.ties(), grads);
  return grads;
}

// Single-device training over minibatches 0..k-1: the reference of every flush schedule.
inline models::ParamSet reference_training(const models::Model& model, models::ParamSet params,
                                           const models::OptimizerSpec& opt, std::uint64_t seed,
                                           std::int64_t k,
                                           const std::function<MinibatchData(std::int64_t)>& data) {
  auto optimizer = models::make_optimizer(opt);
  optimizer->attach(model);  // buffers are their layers' to update, as on the pipeline's stages
  for (std::int64_t b = 0; b < k; ++b) {
    const models::ParamSet g = reference_grads(model, params, data(b), seed, b);
    optimizer->step(params, g);
  }
  return params;
}

// max |a - b| over max(|b|, 1e-3), per tensor, the worst of all.
inline double max_relative_error(const models::ParamSet& a, const models::ParamSet& b) {
  double worst = 0;
  for (std::int64_t i = 0; i < b.size(); ++i) {
    const auto x = a.at(b.name(i)).to_float_vector();
    const auto y = b[i].to_float_vector();
    double diff = 0, scale = 1e-3;
    for (std::size_t k = 0; k < y.size(); ++k) {
      diff = std::max(diff, static_cast<double>(std::fabs(x[k] - y[k])));
      scale = std::max(scale, static_cast<double>(std::fabs(y[k])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

// The deterministic manual scheduler, or 2 worker threads.
inline std::unique_ptr<Scheduler> make_scheduler(bool threads) {
  if (threads) return make_work_sharing({.workers = 2});
  return make_manual();
}

inline models::OptimizerSpec sgd_momentum() {
  models::OptimizerSpec o;
  o.kind = "sgd";
  o.lr = 0.05;
  o.momentum = 0.9;
  return o;
}

}  // namespace tandem::actors::testing
