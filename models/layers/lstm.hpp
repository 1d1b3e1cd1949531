#pragma once

#include <cstdint>

#include "models/layer.hpp"

namespace tandem::models {

// A long short-term memory layer over [batch, T, in] -> [batch, T, hidden], or, bidirectional,
// [batch, T, 2 * hidden]: the forward direction's states, then the reversed direction's (which
// reads the sequence from its end), on the last dimension. PyTorch's LSTM with one bias per gate:
//   z_t = x_t W_ih^T + h_{t-1} W_hh^T + b,  gates in PyTorch's order i, f, g, o;
//   c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g),  h_t = sigmoid(o) tanh(c_t);
// zero initial state. Parameters per direction "weight_ih" [4H, in], "weight_hh" [4H, H],
// "bias" [4H] (then the same with "_reverse"), initialised U(-1/sqrt(H), 1/sqrt(H)) as PyTorch.
// Stack layers for a deeper LSTM: each is its own layer, so a stage cut may fall between them.
//
// Everything runs through Kernels ops (one GEMM projects the input of every step at once; per
// step one GEMM with h_{t-1} and element-wise ops), so any device runs it unchanged. Backward
// through time: backward_input (B) computes dx and appends each direction's gate gradients
// [batch, T, 4H]; backward_weight_into (W) turns them into the weight gradients with three GEMM
// -like calls per direction. Every saved tensor is [batch, ...] (rows), so a forward's state
// can be sliced by samples.
class Lstm final : public Layer {
 public:
  Lstm(std::int64_t in, std::int64_t hidden, bool bidirectional = false);
  std::string kind() const override { return "lstm"; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  Shape output_shape(const Shape& input) const override;
  LayerCost cost(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;
  bool weight_needs_backward_input() const override { return true; }

  std::int64_t hidden() const { return hidden_; }
  bool bidirectional() const { return directions_ == 2; }

 private:
  std::int64_t in_;
  std::int64_t hidden_;
  std::int64_t directions_;
};

}  // namespace tandem::models
