#include "grad_check.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "runtime/counter_rng.hpp"

namespace tandem::models::testing {
namespace {

double loss_of(const Layer& layer, const Context& ctx, ParamView params, const Tensor& x,
               const Tensor& r) {
  Context eval = ctx;  // same masks, nothing kept
  const ForwardResult f = layer.forward(eval, params, x);
  const std::vector<float> y = f.y.to_float_vector();
  const std::vector<float> w = r.to_float_vector();
  double sum = 0;
  for (std::size_t i = 0; i < y.size(); ++i) sum += static_cast<double>(y[i]) * w[i];
  return sum;
}

std::vector<std::int64_t> pick_coordinates(std::int64_t n, int max, std::uint64_t seed) {
  std::vector<std::int64_t> idx;
  if (n <= max) {
    for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  for (int k = 0; k < max; ++k) {
    idx.push_back(static_cast<std::int64_t>(counter_hash(seed, static_cast<std::uint64_t>(k)) %
                                            static_cast<std::uint64_t>(n)));
  }
  std::sort(idx.begin(), idx.end());
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  return idx;
}

// Checks one tensor `t` (the input or a parameter), which `set` overwrites in place.
TensorCheck check_tensor(const std::string& name, Tensor t, const Tensor& analytic,
                         const std::function<double()>& loss, const GradCheckOptions& o,
                         std::uint64_t seed) {
  TensorCheck c;
  c.name = name;
  float* p = t.data<float>();
  const std::vector<float> a = analytic.to_float_vector();
  const std::int64_t n = t.numel();
  auto diff_along = [&](const std::vector<float>& v, double h) {
    std::vector<float> orig(p, p + n);
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(orig[i] + h * v[i]);
    const double up = loss();
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(orig[i] - h * v[i]);
    const double down = loss();
    std::copy(orig.begin(), orig.end(), p);
    return (up - down) / (2 * h);
  };
  struct Probe {
    double analytic;
    double numeric;
    double numeric_half;
  };
  std::vector<Probe> probes;
  std::vector<float> v(static_cast<std::size_t>(n), 0.0f);
  for (const std::int64_t i : pick_coordinates(n, o.max_coordinates, seed)) {
    std::fill(v.begin(), v.end(), 0.0f);
    v[static_cast<std::size_t>(i)] = 1.0f;
    // Steps are exact in f32 relative to the coordinate when h is a power of two multiple.
    probes.push_back(
        {a[static_cast<std::size_t>(i)], diff_along(v, o.step), diff_along(v, o.step / 2)});
  }
  double scale = 1e-2;
  for (const Probe& pr : probes) scale = std::max(scale, std::abs(pr.numeric));
  for (int d = 0; d < o.directions; ++d) {
    double dot = 0;
    double norm = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      v[static_cast<std::size_t>(i)] = static_cast<float>(
          counter_normal(seed ^ 0xd1ec7u, static_cast<std::uint64_t>(d * n + i)));
      norm += static_cast<double>(v[static_cast<std::size_t>(i)]) * v[static_cast<std::size_t>(i)];
    }
    // Unit direction so a directional error is comparable with a coordinate error.
    const double inv = 1.0 / std::sqrt(std::max(norm, 1e-30));
    for (float& x : v) x = static_cast<float>(x * inv);
    for (std::int64_t i = 0; i < n; ++i)
      dot += static_cast<double>(a[static_cast<std::size_t>(i)]) * v[static_cast<std::size_t>(i)];
    probes.push_back({dot, diff_along(v, o.step), diff_along(v, o.step / 2)});
  }
  c.scale = scale;
  for (const Probe& pr : probes) {
    // Central differences converge as h^2: halving h changes a smooth estimate by ~3/4 of its
    // (tiny) truncation error. A larger change means a kink inside the step.
    if (std::abs(pr.numeric - pr.numeric_half) > 0.5 * o.tolerance * scale) {
      ++c.skipped;
      continue;
    }
    ++c.probes;
    c.max_error =
        std::max(c.max_error, std::abs(pr.analytic - pr.numeric_half) / (o.tolerance * scale));
  }
  return c;
}

}  // namespace

bool GradCheckReport::ok() const {
  return std::all_of(tensors.begin(), tensors.end(), [](const TensorCheck& t) { return t.ok(); });
}

std::string GradCheckReport::str() const {
  std::ostringstream s;
  for (const TensorCheck& t : tensors) {
    s << "  " << t.name << ": error/tolerance " << t.max_error << " (scale " << t.scale << ", "
      << t.probes << " probes, " << t.skipped << " skipped)" << (t.ok() ? "" : "  FAILED") << "\n";
  }
  return s.str();
}

Analytic fused_analytic(const Layer& layer, const Context& ctx, ParamView params, const Tensor& x,
                        const Tensor& r) {
  ForwardResult f = layer.forward(ctx, params, x);
  BackwardResult b = layer.backward(ctx, params, f.saved, r, true);
  return {b.dx, b.grads};
}

Analytic split_analytic(const Layer& layer, const Context& ctx, ParamView params, const Tensor& x,
                        const Tensor& r) {
  ForwardResult f = layer.forward(ctx, params, x);
  Tensor dx = layer.backward_input(ctx, params, f.saved, r);
  return {dx, layer.backward_weight(ctx, f.saved, r)};
}

GradCheckReport check_gradients(const Layer& layer, const Context& ctx, std::vector<Tensor> params,
                                const Tensor& x, const GradCheckOptions& options,
                                const AnalyticFn& analytic) {
  const Tensor r = random_tensor(layer.output_shape(x.shape()), options.seed ^ 0x5eedu);
  const Analytic a = analytic(layer, ctx, params, x, r);
  GradCheckReport report;
  const auto loss = [&] { return loss_of(layer, ctx, params, x, r); };
  if (a.dx.defined()) {
    report.tensors.push_back(check_tensor("input", x, a.dx, loss, options, options.seed));
  }
  const std::vector<ParamSpec> specs = layer.param_specs();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    // A buffer's slot holds its layer's statistics, not a derivative of L.
    if (!specs[i].trainable) continue;
    report.tensors.push_back(check_tensor(specs[i].name, params[i], a.grads.at(i), loss, options,
                                          options.seed + 7 * (i + 1)));
  }
  return report;
}

Tensor random_tensor(const Shape& shape, std::uint64_t seed, float scale) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    p[i] = scale * static_cast<float>(counter_normal(seed, static_cast<std::uint64_t>(i)));
  }
  return t;
}

std::vector<Tensor> random_params(const Layer& layer, std::uint64_t seed, float scale) {
  std::vector<Tensor> params;
  std::uint64_t k = 0;
  for (const ParamSpec& spec : layer.param_specs()) {
    params.push_back(random_tensor(spec.shape, counter_hash(seed, k++), scale));
    // Buffers hold statistics (a variance, a count): positive, from 0.5 up.
    if (!spec.trainable) {
      float* p = params.back().data<float>();
      for (std::int64_t i = 0; i < params.back().numel(); ++i) p[i] = 0.5f + std::abs(p[i]);
    }
  }
  return params;
}

}  // namespace tandem::models::testing
