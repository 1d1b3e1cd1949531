#pragma once
// Runs every layer type through forward and every backward entry point with fixed data, so that
// two runs (two kernel implementations, or before and after a change) can be compared bit for
// bit.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grad_check.hpp"
#include "models/layer.hpp"
#include "models/layers/activation.hpp"
#include "models/layers/attention.hpp"
#include "models/layers/avg_pool2d.hpp"
#include "models/layers/batch_norm2d.hpp"
#include "models/layers/conv2d.hpp"
#include "models/layers/dropout.hpp"
#include "models/layers/embedding.hpp"
#include "models/layers/flatten.hpp"
#include "models/layers/global_avg_pool2d.hpp"
#include "models/layers/layer_norm.hpp"
#include "models/layers/linear.hpp"
#include "models/layers/lstm.hpp"
#include "models/layers/max_pool2d.hpp"
#include "models/layers/seq_attention.hpp"
#include "models/layers/transformer_block.hpp"
#include "two_inputs.hpp"

namespace tandem::models::testing {

struct LayerCase {
  std::string name;
  std::shared_ptr<const Layer> layer;
  Tensor x;
  bool training = true;
};

inline std::vector<LayerCase> layer_cases() {
  using cpu::Activation;
  std::vector<LayerCase> c;
  auto add = [&](std::string name, std::shared_ptr<const Layer> layer, Shape shape,
                 bool training = true) {
    c.push_back(
        {std::move(name), std::move(layer), random_tensor(shape, c.size() + 100), training});
  };
  add("linear", std::make_shared<Linear>(12, 7, Activation::none), {2, 3, 12});
  add("linear_relu", std::make_shared<Linear>(12, 7, Activation::relu), {2, 3, 12});
  add("linear_gelu", std::make_shared<Linear>(12, 7, Activation::gelu), {6, 12});
  add("linear_nobias", std::make_shared<Linear>(12, 7, Activation::none, false), {6, 12});
  add("relu", std::make_shared<ReLU>(), {4, 10});
  add("gelu", std::make_shared<GELU>(), {4, 10});
  add("conv_relu", std::make_shared<Conv2d>(3, 4, 3, 1, 1, Activation::relu), {2, 3, 8, 8});
  add("conv_none", std::make_shared<Conv2d>(3, 5, 3, 2, 0, Activation::none), {3, 3, 9, 9});
  // Several im2col chunks (the column buffer is capped at 8M floats).
  add("conv_chunks", std::make_shared<Conv2d>(1, 2, 3, 1, 1, Activation::relu), {3, 1, 600, 600});
  add("conv_empty", std::make_shared<Conv2d>(3, 4, 3, 1, 1, Activation::relu), {0, 3, 8, 8});
  add("dropout", std::make_shared<Dropout>(0.3f, 7), {4, 10});
  add("dropout_eval", std::make_shared<Dropout>(0.3f, 7), {4, 10}, false);
  add("flatten", std::make_shared<Flatten>(), {2, 3, 4});
  add("layer_norm", std::make_shared<LayerNorm>(6), {2, 3, 6});
  add("max_pool", std::make_shared<MaxPool2d>(2), {2, 3, 6, 6});
  add("max_pool_pad", std::make_shared<MaxPool2d>(3, 2, 1), {2, 3, 7, 6});
  add("conv_1x3", std::make_shared<Conv2d>(3, 4, 1, 3, 1, 0, 1, Activation::relu), {2, 3, 5, 6});
  add("conv_7x1", std::make_shared<Conv2d>(2, 3, 7, 1, 2, 3, 0, Activation::none), {2, 2, 9, 5});
  add("batch_norm", std::make_shared<BatchNorm2d>(3), {3, 3, 4, 5});
  add("batch_norm_eval", std::make_shared<BatchNorm2d>(3), {3, 3, 4, 5}, false);
  add("avg_pool", std::make_shared<AvgPool2d>(2), {2, 3, 6, 6});
  add("avg_pool_pad", std::make_shared<AvgPool2d>(3, 2, 1), {2, 3, 7, 6});
  add("global_avg_pool", std::make_shared<GlobalAvgPool2d>(), {2, 3, 4, 5});
  add("attention", std::make_shared<CausalSelfAttention>(8, 2), {2, 5, 8});
  add("block", std::make_shared<TransformerBlock>(8, 2, 16, 0.1f, 3, 2), {2, 5, 8});
  add("block_eval", std::make_shared<TransformerBlock>(8, 2, 16, 0.1f, 3, 2), {2, 5, 8}, false);
  add("lstm", std::make_shared<Lstm>(5, 4), {2, 4, 5});
  add("bilstm", std::make_shared<Lstm>(5, 3, true), {3, 4, 5});
  // Decoder states [2, 3, 4] and encoder outputs [2, 5, 6], flattened into one input.
  add("seq_attention",
      std::make_shared<TwoInputs>(std::make_shared<SeqAttention>(4, 6), Shape{3, 4}, Shape{5, 6}),
      {2, 3 * 4 + 5 * 6});
  const std::vector<std::int32_t> ids{1, 4, 0, 10, 3, 3, 7, 2, 9, 5};
  c.push_back(
      {"embedding_pos", std::make_shared<Embedding>(11, 6, 8), Tensor::from_vector(ids, {2, 5})});
  c.push_back(
      {"embedding", std::make_shared<Embedding>(11, 6, 0), Tensor::from_vector(ids, {2, 5})});
  return c;
}

// Called with every tensor the test itself creates and hands to the layer (parameters, output
// gradients, gradient sinks), so that a checker can tell them from what the layer allocated.
using HandIn = std::function<void(const Tensor&)>;
// Called before each of the phases below: "forward", "backward" (fused, fresh gradients and
// dx), "backward_into" (fused, accumulating, no dx), "backward_input", "backward_weight".
using OnPhase = std::function<void(const std::string&)>;

// Every tensor the case produces, named: forward output, then fused backward (fresh and
// accumulating gradients), then the split backward (input, then weights). Nothing the case
// runs writes an earlier result, so they are returned as they came, not copied.
inline std::vector<std::pair<std::string, Tensor>> run_case(const LayerCase& lc,
                                                            const Context& base,
                                                            const HandIn& hand_in = {},
                                                            const OnPhase& on_phase = {}) {
  std::vector<std::pair<std::string, Tensor>> out;
  auto phase = [&](const std::string& name) {
    if (on_phase) on_phase(name);
  };
  auto given = [&](const Tensor& t) {
    if (hand_in) hand_in(t);
    return t;
  };
  Context ctx = base;
  ctx.training = lc.training;
  const Layer& layer = *lc.layer;
  given(lc.x);
  std::vector<Tensor> params = random_params(layer, 5);
  for (const Tensor& t : params) given(t);
  const Tensor dy = given(random_tensor(layer.output_shape(lc.x.shape()), 77));

  phase("forward");
  ForwardResult f = layer.forward(ctx, params, lc.x);
  out.emplace_back("y", f.y);
  {
    Saved s = f.saved;
    phase("backward");
    BackwardResult b = layer.backward(ctx, params, s, dy);
    if (b.dx.defined()) out.emplace_back("dx", b.dx);
    for (std::size_t i = 0; i < b.grads.size(); ++i)
      out.emplace_back("grad" + std::to_string(i), b.grads[i]);
  }
  {
    Saved s = f.saved;
    std::vector<Tensor> grads = random_params(layer, 9);
    for (const Tensor& t : grads) given(t);
    phase("backward_into");
    layer.backward_into(ctx, params, s, dy, false, GradSink{grads, -0.25f, 0.5f});
    for (std::size_t i = 0; i < grads.size(); ++i)
      out.emplace_back("acc_grad" + std::to_string(i), grads[i]);
  }
  {
    Saved s = f.saved;
    phase("backward_input");
    Tensor dx = layer.backward_input(ctx, params, s, dy);
    if (dx.defined()) out.emplace_back("split_dx", dx);
    phase("backward_weight");
    std::vector<Tensor> grads = layer.backward_weight(ctx, s, dy);
    for (std::size_t i = 0; i < grads.size(); ++i)
      out.emplace_back("split_grad" + std::to_string(i), grads[i]);
  }
  return out;
}

inline std::uint64_t fnv1a(const Tensor& t) {
  std::uint64_t h = 1469598103934665603ull;
  for (float v : t.to_float_vector()) {
    std::uint32_t bits;
    static_assert(sizeof bits == sizeof v);
    __builtin_memcpy(&bits, &v, sizeof v);
    for (int k = 0; k < 4; ++k) {
      h ^= (bits >> (8 * k)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

}  // namespace tandem::models::testing
