#include "models/layers/lstm.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/linear_ops.hpp"

namespace tandem::models {
namespace {

using detail::ptr;

// Saved by forward: the input x [b, T, in], the output y [b, T, dirs * H] (h_{t-1} for W),
// then per direction the gate activations [b, T, 4H] and the cell states [b, T, H]. B appends
// per direction the gate pre-activation gradients [b, T, 4H].
constexpr std::size_t kPerDirection = 2;

std::size_t forward_saved(std::int64_t directions) {
  return 2 + kPerDirection * static_cast<std::size_t>(directions);
}

// The time step a direction processes as its s-th (the reversed direction starts at the end).
std::int64_t time_of(std::int64_t s, std::int64_t steps, bool reverse) {
  return reverse ? steps - 1 - s : s;
}

}  // namespace

Lstm::Lstm(std::int64_t in, std::int64_t hidden, bool bidirectional)
    : in_(in), hidden_(hidden), directions_(bidirectional ? 2 : 1) {
  if (in <= 0 || hidden <= 0) {
    throw std::invalid_argument("Lstm: input width " + std::to_string(in) + " and hidden " +
                                std::to_string(hidden) + " must be positive");
  }
}

std::string Lstm::describe() const {
  return std::string(directions_ == 2 ? "bilstm(" : "lstm(") + std::to_string(in_) + "->" +
         std::to_string(hidden_) + ")";
}

std::vector<ParamSpec> Lstm::param_specs() const {
  // U(-1/sqrt(H), 1/sqrt(H)) for every tensor, as torch.nn.LSTM: uniform_fan_in with fan_in H.
  std::vector<ParamSpec> specs;
  for (std::int64_t d = 0; d < directions_; ++d) {
    const std::string suffix = d == 0 ? "" : "_reverse";
    specs.push_back(
        {"weight_ih" + suffix, {4 * hidden_, in_}, Init::uniform_fan_in, 1.0f, hidden_});
    specs.push_back(
        {"weight_hh" + suffix, {4 * hidden_, hidden_}, Init::uniform_fan_in, 1.0f, hidden_});
    specs.push_back({"bias" + suffix, {4 * hidden_}, Init::uniform_fan_in, 1.0f, hidden_});
  }
  return specs;
}

Shape Lstm::output_shape(const Shape& input) const {
  if (input.size() != 3 || input[1] < 1 || input[2] != in_) {
    throw std::invalid_argument(describe() + ": input shape " + shape_str(input) +
                                " is not [batch, steps >= 1, " + std::to_string(in_) + "]");
  }
  return {input[0], input[1], directions_ * hidden_};
}

LayerCost Lstm::cost(const Shape& input) const {
  output_shape(input);
  // Per direction and token: the input projection (4H x in) and the recurrent product (4H x H).
  const double tokens = static_cast<double>(input[0] * input[1]);
  const double per = 2 * tokens * 4 * static_cast<double>(hidden_) *
                     static_cast<double>(in_ + hidden_) * static_cast<double>(directions_);
  return {per, per, per};
}

ForwardResult Lstm::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  const Shape out_shape = output_shape(x32.shape());
  const std::int64_t b = out_shape[0];
  const std::int64_t steps = out_shape[1];
  const std::int64_t h = hidden_;
  const std::int64_t width = out_shape[2];  // of y's rows: all directions
  const std::int64_t bh = b * h;
  Tensor y = k.empty(out_shape);
  ForwardResult r;
  if (ctx.keep_saved) r.saved = {x32, y};
  // Per step, gate-major scratch: the four gates [4, b, H] so that each activation runs over one
  // contiguous range; h and c of the step.
  Tensor act = k.empty({4, b, h});
  Tensor cell = k.empty({b, h});
  Tensor tanh_c = k.empty({b, h});
  Tensor hid = k.empty({b, h});
  float* i_g = ptr(act);
  float* f_g = i_g + bh;
  float* g_g = i_g + 2 * bh;
  float* o_g = i_g + 3 * bh;
  for (std::int64_t d = 0; d < directions_; ++d) {
    const bool reverse = d == 1;
    const auto p = static_cast<std::size_t>(3 * d);
    // Pre-activations of every step at once: x W_ih^T + b, [b, T, 4H]; each step then adds its
    // recurrent product in place.
    Tensor gates = k.empty({b, steps, 4 * h});
    detail::linear_forward(k, ptr(x32), b * steps, in_, ptr(params[p]), ptr(params[p + 2]), 4 * h,
                           Activation::none, ptr(gates), nullptr);
    Tensor acts = k.empty({b, steps, 4 * h});
    Tensor cells = k.empty({b, steps, h});
    for (std::int64_t s = 0; s < steps; ++s) {
      const std::int64_t t = time_of(s, steps, reverse);
      float* z = ptr(gates) + t * 4 * h;
      if (s > 0) {
        const std::int64_t prev = time_of(s - 1, steps, reverse);
        k.gemm(false, true, b, 4 * h, h, 1.0f, ptr(y) + prev * width + d * h, steps * width,
               ptr(params[p + 1]), h, 1.0f, z, steps * 4 * h);
      }
      for (std::int64_t q = 0; q < 4; ++q) {
        k.copy_2d(z + q * h, steps * 4 * h, i_g + q * bh, h, b, h);
      }
      k.act_forward(i_g, i_g, 2 * bh, Activation::sigmoid);  // i and f
      k.act_forward(g_g, g_g, bh, Activation::tanh);
      k.act_forward(o_g, o_g, bh, Activation::sigmoid);
      if (s == 0) {
        k.multiply(i_g, g_g, 1.0f, 0.0f, ptr(cell), bh);
      } else {
        k.multiply(f_g, ptr(cell), 1.0f, 0.0f, ptr(cell), bh);
        k.multiply(i_g, g_g, 1.0f, 1.0f, ptr(cell), bh);
      }
      k.act_forward(ptr(cell), ptr(tanh_c), bh, Activation::tanh);
      k.multiply(o_g, ptr(tanh_c), 1.0f, 0.0f, ptr(hid), bh);
      k.copy_2d(ptr(hid), h, ptr(y) + t * width + d * h, steps * width, b, h);
      if (!ctx.keep_saved) continue;
      // Kept batch-major ([b, T, ...]) so that the state slices by samples.
      for (std::int64_t q = 0; q < 4; ++q) {
        k.copy_2d(i_g + q * bh, h, ptr(acts) + t * 4 * h + q * h, steps * 4 * h, b, h);
      }
      k.copy_2d(ptr(cell), h, ptr(cells) + t * h, steps * h, b, h);
    }
    if (ctx.keep_saved) {
      r.saved.push_back(acts);
      r.saved.push_back(cells);
    }
  }
  r.y = y;
  return r;
}

Tensor Lstm::backward_input(const Context& ctx, ParamView params, Saved& saved,
                            const Tensor& dy) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  const std::size_t kept = forward_saved(directions_);
  detail::require_saved(saved, kept, who);
  saved.resize(kept);  // drop gradients of an earlier backward_input
  const Tensor& x = saved[0];
  const Shape out_shape = output_shape(x.shape());
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, out_shape, who, "output gradient");
  const std::int64_t b = out_shape[0];
  const std::int64_t steps = out_shape[1];
  const std::int64_t h = hidden_;
  const std::int64_t width = out_shape[2];
  const std::int64_t bh = b * h;
  Tensor dx = k.empty(x.shape());
  // Per step, gate-major: the activations and their pre-activation gradients [4, b, H].
  Tensor act = k.empty({4, b, h});
  Tensor dact = k.empty({4, b, h});
  Tensor dh = k.empty({b, h});
  Tensor dc = k.empty({b, h});     // the cell gradient of this step
  Tensor carry = k.empty({b, h});  // dc_{next} * f_{next}: the cell gradient the next step left
  Tensor cell = k.empty({b, h});
  Tensor cell_prev = k.empty({b, h});
  Tensor tanh_c = k.empty({b, h});
  const float* i_g = ptr(act);
  const float* f_g = i_g + bh;
  const float* g_g = i_g + 2 * bh;
  const float* o_g = i_g + 3 * bh;
  float* di = ptr(dact);
  float* df = di + bh;
  float* dg = di + 2 * bh;
  float* dout = di + 3 * bh;
  for (std::int64_t d = 0; d < directions_; ++d) {
    const bool reverse = d == 1;
    const auto p = static_cast<std::size_t>(3 * d);
    const Tensor& acts = saved[2 + kPerDirection * static_cast<std::size_t>(d)];
    const Tensor& cells = saved[3 + kPerDirection * static_cast<std::size_t>(d)];
    Tensor dgates = k.empty({b, steps, 4 * h});
    for (std::int64_t s = steps - 1; s >= 0; --s) {
      const std::int64_t t = time_of(s, steps, reverse);
      // dh_t: the output's gradient, plus what step s + 1 sent back through W_hh.
      k.copy_2d(ptr(dy32) + t * width + d * h, steps * width, ptr(dh), h, b, h);
      if (s + 1 < steps) {
        const std::int64_t next = time_of(s + 1, steps, reverse);
        k.gemm(false, false, b, h, 4 * h, 1.0f, ptr(dgates) + next * 4 * h, steps * 4 * h,
               ptr(params[p + 1]), h, 1.0f, ptr(dh), h);
      }
      for (std::int64_t q = 0; q < 4; ++q) {
        k.copy_2d(ptr(acts) + t * 4 * h + q * h, steps * 4 * h, ptr(act) + q * bh, h, b, h);
      }
      k.copy_2d(ptr(cells) + t * h, steps * h, ptr(cell), h, b, h);
      k.act_forward(ptr(cell), ptr(tanh_c), bh, Activation::tanh);
      // h = o tanh(c)
      k.multiply(ptr(dh), ptr(tanh_c), 1.0f, 0.0f, dout, bh);
      k.act_backward(dout, o_g, dout, bh, Activation::sigmoid);
      k.multiply(ptr(dh), o_g, 1.0f, 0.0f, ptr(dc), bh);
      k.act_backward(ptr(dc), ptr(tanh_c), ptr(dc), bh, Activation::tanh);
      if (s + 1 < steps) k.add(ptr(dc), ptr(carry), ptr(dc), bh);
      // c = f c_prev + i g
      k.multiply(ptr(dc), g_g, 1.0f, 0.0f, di, bh);
      k.act_backward(di, i_g, di, bh, Activation::sigmoid);
      k.multiply(ptr(dc), i_g, 1.0f, 0.0f, dg, bh);
      k.act_backward(dg, g_g, dg, bh, Activation::tanh);
      if (s > 0) {
        const std::int64_t prev = time_of(s - 1, steps, reverse);
        k.copy_2d(ptr(cells) + prev * h, steps * h, ptr(cell_prev), h, b, h);
        k.multiply(ptr(dc), ptr(cell_prev), 1.0f, 0.0f, df, bh);
        k.act_backward(df, f_g, df, bh, Activation::sigmoid);
        k.multiply(ptr(dc), f_g, 1.0f, 0.0f, ptr(carry), bh);
      } else {
        k.fill(df, bh, 0.0f);  // the initial cell state is zero
      }
      for (std::int64_t q = 0; q < 4; ++q) {
        k.copy_2d(di + q * bh, h, ptr(dgates) + t * 4 * h + q * h, steps * 4 * h, b, h);
      }
    }
    // dx = sum over directions of dgates W_ih.
    k.gemm(false, false, b * steps, in_, 4 * h, 1.0f, ptr(dgates), 4 * h, ptr(params[p]), in_,
           d == 0 ? 0.0f : 1.0f, ptr(dx), in_);
    saved.push_back(dgates);
  }
  return dx;
}

void Lstm::backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                                const GradSink& sink) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_sink(k, sink, param_specs(), who);
  const std::size_t kept = forward_saved(directions_);
  if (saved.size() != kept + static_cast<std::size_t>(directions_)) {
    throw std::invalid_argument(who + ": backward_weight needs backward_input to run first");
  }
  const Tensor& x = saved[0];
  const Tensor& y = saved[1];
  const Shape out_shape = output_shape(x.shape());
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, out_shape, who, "output gradient");
  const std::int64_t b = out_shape[0];
  const std::int64_t steps = out_shape[1];
  const std::int64_t h = hidden_;
  const std::int64_t width = out_shape[2];
  const std::int64_t rows = b * steps;
  const float alpha = sink.alpha;
  const float beta = sink.beta;
  // h_{t-1} of every step, aligned with the gate gradients' rows (zero where a direction starts).
  Tensor h_prev = k.empty({b, steps, h});
  for (std::int64_t d = 0; d < directions_; ++d) {
    const bool reverse = d == 1;
    const auto p = static_cast<std::size_t>(3 * d);
    const Tensor& dgates = saved[kept + static_cast<std::size_t>(d)];
    detail::linear_backward_weight(k, ptr(dgates), ptr(x), rows, in_, 4 * h, alpha, beta,
                                   ptr(sink.grads[p]));
    k.fill(ptr(h_prev), h_prev.numel(), 0.0f);
    for (std::int64_t s = 1; s < steps; ++s) {
      const std::int64_t t = time_of(s, steps, reverse);
      const std::int64_t prev = time_of(s - 1, steps, reverse);
      k.copy_2d(ptr(y) + prev * width + d * h, steps * width, ptr(h_prev) + t * h, steps * h, b, h);
    }
    k.gemm(true, false, 4 * h, h, rows, alpha, ptr(dgates), 4 * h, ptr(h_prev), h, beta,
           ptr(sink.grads[p + 1]), h);
    k.column_sum(ptr(dgates), rows, 4 * h, alpha, beta, ptr(sink.grads[p + 2]));
  }
}

}  // namespace tandem::models
