#include "models/layers/conv2d.hpp"

#include <algorithm>
#include <stdexcept>

#include "models/detail/checks.hpp"

namespace tandem::models {
namespace {

// Samples per im2col chunk: the column buffer stays under this many floats (bounded memory for
// large images; one chunk for small ones).
constexpr std::int64_t kColBudget = std::int64_t{8} << 20;

}  // namespace

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
               std::int64_t stride, std::int64_t pad, cpu::Activation act)
    : Conv2d(in_channels, out_channels, kernel, kernel, stride, pad, pad, act) {}

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_h,
               std::int64_t kernel_w, std::int64_t stride, std::int64_t pad_h, std::int64_t pad_w,
               cpu::Activation act)
    : in_(in_channels),
      out_(out_channels),
      kernel_h_(kernel_h),
      kernel_w_(kernel_w),
      stride_(stride),
      pad_h_(pad_h),
      pad_w_(pad_w),
      act_(act) {
  if (in_channels <= 0 || out_channels <= 0 || kernel_h <= 0 || kernel_w <= 0 || stride <= 0 ||
      pad_h < 0 || pad_w < 0) {
    throw std::invalid_argument("Conv2d: need positive channels, kernel and stride, pad >= 0");
  }
  if (act != cpu::Activation::none && act != cpu::Activation::relu) {
    throw std::invalid_argument("Conv2d: fused activation must be none or relu");
  }
}

std::string Conv2d::describe() const {
  // A square window reads as it always has: "k=3, stride=1, pad=1".
  const std::string k = kernel_h_ == kernel_w_
                            ? std::to_string(kernel_h_)
                            : std::to_string(kernel_h_) + "x" + std::to_string(kernel_w_);
  const std::string pad = pad_h_ == pad_w_ ? std::to_string(pad_h_)
                                           : std::to_string(pad_h_) + "x" + std::to_string(pad_w_);
  std::string s = "conv2d(" + std::to_string(in_) + "->" + std::to_string(out_) + ", k=" + k +
                  ", stride=" + std::to_string(stride_) + ", pad=" + pad;
  if (act_ != cpu::Activation::none) s += std::string(", ") + cpu::activation_name(act_);
  return s + ")";
}

std::vector<ParamSpec> Conv2d::param_specs() const {
  const std::int64_t fan_in = in_ * kernel_h_ * kernel_w_;
  // Followed by a ReLU: He initialisation (variance 2 / fan_in, zero bias). PyTorch's default
  // (variance 1 / (3 fan_in)) shrinks the signal ~6x per conv+ReLU, so after VGG-16's 13
  // convolutions the logits no longer depend on the input (small VGG stuck at 49%).
  if (act_ == cpu::Activation::relu) {
    return {{"weight", {out_, in_, kernel_h_, kernel_w_}, Init::uniform_fan_in, kHeScale, fan_in},
            {"bias", {out_}, Init::zeros, 1.0f, fan_in}};
  }
  return {{"weight", {out_, in_, kernel_h_, kernel_w_}, Init::uniform_fan_in, 1.0f, fan_in},
          {"bias", {out_}, Init::uniform_fan_in, 1.0f, fan_in}};
}

Shape Conv2d::output_shape(const Shape& input) const {
  if (input.size() != 4 || input[1] != in_ || input[2] + 2 * pad_h_ < kernel_h_ ||
      input[3] + 2 * pad_w_ < kernel_w_) {
    throw std::invalid_argument(describe() + ": input shape " + shape_str(input) +
                                " is not [batch, " + std::to_string(in_) +
                                ", H, W] with a window that fits");
  }
  return {input[0], out_, (input[2] + 2 * pad_h_ - kernel_h_) / stride_ + 1,
          (input[3] + 2 * pad_w_ - kernel_w_) / stride_ + 1};
}

ConvGeometry Conv2d::geometry(const Shape& input) const {
  return {in_, input[2], input[3], kernel_h_, kernel_w_, stride_, pad_h_, pad_w_};
}

LayerCost Conv2d::cost(const Shape& input) const {
  const Shape out = output_shape(input);
  const double mac = static_cast<double>(out[0]) * static_cast<double>(out_) *
                     static_cast<double>(in_ * kernel_h_ * kernel_w_) *
                     static_cast<double>(out[2] * out[3]);
  return {2 * mac, 2 * mac, 2 * mac};
}

ForwardResult Conv2d::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  const Shape out_shape = output_shape(x32.shape());
  const ConvGeometry g = geometry(x32.shape());
  const std::int64_t batch = out_shape[0];
  const std::int64_t ohw = g.out_hw();
  const std::int64_t ckk = g.col_rows();
  const std::int64_t chunk = std::clamp<std::int64_t>(
      kColBudget / std::max<std::int64_t>(1, ckk * ohw), 1, std::max<std::int64_t>(batch, 1));
  Tensor y = k.empty(out_shape);
  Tensor col = k.empty({ckk, chunk * ohw});
  Tensor ycm = k.empty({out_, chunk * ohw});
  const float* w = detail::ptr(params[0]);
  const float* bias = detail::ptr(params[1]);
  for (std::int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const std::int64_t n = std::min(chunk, batch - s0);
    const std::int64_t cols = n * ohw;
    k.im2col(detail::ptr(x32) + s0 * g.sample_size(), g, n, detail::ptr(col));
    k.gemm(false, false, out_, cols, ckk, 1.0f, w, ckk, detail::ptr(col), cols, 0.0f,
           detail::ptr(ycm), cols);
    k.row_bias_act_forward(detail::ptr(ycm), bias, out_, cols, act_);
    k.cm_to_nchw(detail::ptr(ycm), n, out_, ohw, detail::ptr(y) + s0 * out_ * ohw);
  }
  ForwardResult r{y, {}};
  if (ctx.keep_saved) {
    r.saved.push_back(x32);
    if (act_ == cpu::Activation::relu) r.saved.push_back(y);
  }
  return r;
}

Tensor Conv2d::run_backward(const Kernels& k, ParamView params, const Saved& saved,
                            const Tensor& dy, bool need_dx, const GradSink* sink) const {
  const std::string who = describe();
  detail::require_saved(saved, act_ == cpu::Activation::none ? 1 : 2, who);
  const Tensor& x = saved[0];
  const Shape out_shape = output_shape(x.shape());
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, out_shape, who, "output gradient");
  const ConvGeometry g = geometry(x.shape());
  const std::int64_t batch = out_shape[0];
  const std::int64_t ohw = g.out_hw();
  const std::int64_t ckk = g.col_rows();
  const std::int64_t chunk = std::clamp<std::int64_t>(
      kColBudget / std::max<std::int64_t>(1, ckk * ohw), 1, std::max<std::int64_t>(batch, 1));
  const std::int64_t chunks = batch == 0 ? 0 : (batch + chunk - 1) / chunk;

  Tensor dz = dy32;
  if (act_ == cpu::Activation::relu) {
    dz = k.empty(out_shape);
    k.act_backward(detail::ptr(dy32), detail::ptr(saved[1]), detail::ptr(dz), dz.numel(), act_);
  }
  Tensor dzcm = k.empty({out_, chunk * ohw});
  Tensor col = k.empty({ckk, chunk * ohw});
  std::int64_t dzcm_chunk = -1;  // which chunk dzcm holds
  auto load_dz = [&](std::int64_t c) {
    if (dzcm_chunk == c) return;
    const std::int64_t s0 = c * chunk;
    k.nchw_to_cm(detail::ptr(dz) + s0 * out_ * ohw, std::min(chunk, batch - s0), out_, ohw,
                 detail::ptr(dzcm));
    dzcm_chunk = c;
  };
  Tensor dx;
  // All of dx first: the sink may alias the weight (fused SGD), which dx still needs.
  if (need_dx) {
    dx = k.empty(x.shape());
    const float* w = detail::ptr(params[0]);
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t s0 = c * chunk;
      const std::int64_t cols = std::min(chunk, batch - s0) * ohw;
      load_dz(c);
      k.gemm(true, false, ckk, cols, out_, 1.0f, w, ckk, detail::ptr(dzcm), cols, 0.0f,
             detail::ptr(col), cols);
      k.col2im(detail::ptr(col), g, std::min(chunk, batch - s0),
               detail::ptr(dx) + s0 * g.sample_size());
    }
  }
  if (sink != nullptr) {
    float* dw = detail::ptr(sink->grads[0]);
    float* db = detail::ptr(sink->grads[1]);
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t s0 = c * chunk;
      const std::int64_t n = std::min(chunk, batch - s0);
      const std::int64_t cols = n * ohw;
      const float beta = c == 0 ? sink->beta : 1.0f;
      load_dz(c);
      k.im2col(detail::ptr(x) + s0 * g.sample_size(), g, n, detail::ptr(col));
      k.gemm(false, true, out_, ckk, cols, sink->alpha, detail::ptr(dzcm), cols, detail::ptr(col),
             cols, beta, dw, ckk);
      k.row_sum(detail::ptr(dzcm), out_, cols, sink->alpha, beta, db);
    }
    // An empty batch still owes the sink its beta scaling.
    if (chunks == 0) {
      for (Tensor& t : sink->grads) k.scale(detail::ptr(t), t.numel(), sink->beta);
    }
  }
  return dx;
}

Tensor Conv2d::backward_input(const Context& ctx, ParamView params, Saved& saved,
                              const Tensor& dy) const {
  detail::require_params(ctx.k(), params, param_specs(), describe());
  return run_backward(ctx.k(), params, saved, dy, true, nullptr);
}

void Conv2d::backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                                  const GradSink& sink) const {
  detail::require_sink(ctx.k(), sink, param_specs(), describe());
  run_backward(ctx.k(), {}, saved, dy, false, &sink);
}

Tensor Conv2d::backward_into(const Context& ctx, ParamView params, Saved& saved, const Tensor& dy,
                             bool need_dx, const GradSink& sink) const {
  detail::require_params(ctx.k(), params, param_specs(), describe());
  detail::require_sink(ctx.k(), sink, param_specs(), describe());
  return run_backward(ctx.k(), params, saved, dy, need_dx, &sink);
}

}  // namespace tandem::models
