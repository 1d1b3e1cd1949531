#pragma once

#include <cstdint>

#include "models/layers/merge_layer.hpp"

namespace tandem::models {

// Attention of a decoder over an encoder's sequence (GNMT's attention, in Luong's "general"
// form for simplicity rather than GNMT's normalised Bahdanau form): two inputs, the decoder
// states q [batch, Td, H] and the encoder outputs e [batch, Te, He];
//   scores = q W e^T [batch, Td, Te],  p = softmax over Te,  context = p e [batch, Td, He],
//   output = concat(q, context) [batch, Td, H + He] on the last dimension,
// so that a following linear or LSTM reads both. No mask: every decoder position sees the
// whole source. One parameter "weight" W [H, He]. backward_input_n gives both inputs'
// gradients and appends dU = d(q W) [batch, Td, He] to the saved state; backward_weight_into
// makes dW = q^T dU from it. Every saved tensor is [batch, ...] (rows).
class SeqAttention final : public MergeLayer {
 public:
  SeqAttention(std::int64_t query_width, std::int64_t key_width);
  std::string kind() const override { return "seq_attention"; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  Shape output_shape_n(std::span<const Shape> inputs) const override;
  ForwardResult forward_n(const Context& ctx, ParamView params,
                          std::span<const Tensor> xs) const override;
  std::vector<Tensor> backward_input_n(const Context& ctx, ParamView params, Saved& saved,
                                       const Tensor& dy,
                                       const std::vector<bool>& want) const override;
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;
  bool weight_needs_backward_input() const override { return true; }

 private:
  std::int64_t h_;   // q's width
  std::int64_t he_;  // e's width
};

}  // namespace tandem::models
