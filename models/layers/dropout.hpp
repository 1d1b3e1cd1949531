#pragma once

#include <cstdint>

#include "models/layer.hpp"

namespace tandem::models {

// Inverted dropout with probability p. The mask of element j of sample s is a pure function of
// (ctx.seed, salt, ctx.sample_begin + s, j): the same step seed gives the same masks however the
// minibatch is sliced or threaded. Identity when !ctx.training or p == 0.
class Dropout final : public Layer {
 public:
  Dropout(float p, std::uint64_t salt);
  std::string kind() const override { return "dropout"; }
  std::string describe() const override;
  Shape output_shape(const Shape& input) const override { return input; }
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  SavedLayout saved_layout(std::size_t k) const override;

  // The mask's key for a step seed (shared with layers that embed a dropout).
  static std::uint64_t key(std::uint64_t seed, std::uint64_t salt);

 private:
  float p_;
  std::uint64_t salt_;
};

}  // namespace tandem::models
