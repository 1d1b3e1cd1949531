#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/layer.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models::testing {

// Finite-difference gradient checking for layers.
//
// The scalar checked is L = sum_i y_i * r_i for a fixed random r (so dL/dy = r), accumulated in
// double. Derivatives are central differences. Two kinds of probes, for the input and for
// every parameter:
//  * coordinates: every element of small tensors, a fixed sample of large ones;
//  * directions: L(t + h v) vs L(t - h v) against <grad, v> for random v over the whole tensor,
//    so an error anywhere in the tensor moves the result.
// Non-smooth points (a ReLU or max-pool switching inside the step) are recognised because the
// differences at steps h and h/2 disagree; such probes are skipped and counted.
struct GradCheckOptions {
  double step = 1e-2;
  // A probe fails when |analytic - numeric| > tolerance * scale, scale = the largest |numeric|
  // coordinate of that tensor (at least 1e-2).
  double tolerance = 1e-3;
  int max_coordinates = 48;
  int directions = 3;
  std::uint64_t seed = 1;
};

struct TensorCheck {
  std::string name;      // "input" or the parameter's name
  double max_error = 0;  // largest |analytic - numeric| / scale
  double scale = 0;
  int probes = 0;
  int skipped = 0;  // non-smooth probes
  bool ok() const { return probes > 0 && max_error <= 1.0 && skipped * 5 <= probes + skipped; }
};

struct GradCheckReport {
  std::vector<TensorCheck> tensors;
  bool ok() const;
  std::string str() const;
};

// The analytic gradients to verify: dx (undefined when the input is not differentiable) and one
// tensor per parameter. By default computed with layer.backward (fused); tests may pass their own
// (e.g. B then W, or a deliberately wrong one).
struct Analytic {
  Tensor dx;
  std::vector<Tensor> grads;
};
using AnalyticFn = std::function<Analytic(const Layer&, const Context&, ParamView, const Tensor& x,
                                          const Tensor& r)>;

Analytic fused_analytic(const Layer& layer, const Context& ctx, ParamView params, const Tensor& x,
                        const Tensor& r);
Analytic split_analytic(const Layer& layer, const Context& ctx, ParamView params, const Tensor& x,
                        const Tensor& r);

GradCheckReport check_gradients(const Layer& layer, const Context& ctx, std::vector<Tensor> params,
                                const Tensor& x, const GradCheckOptions& options = {},
                                const AnalyticFn& analytic = fused_analytic);

// Deterministic test data.
Tensor random_tensor(const Shape& shape, std::uint64_t seed, float scale = 1.0f);
// Buffers (ParamSpec::trainable false) get positive values, and check_gradients skips them.
std::vector<Tensor> random_params(const Layer& layer, std::uint64_t seed, float scale = 0.5f);

}  // namespace tandem::models::testing
