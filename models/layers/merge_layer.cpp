#include "models/layers/merge_layer.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"

namespace tandem::models {
namespace {

// The f32 inputs of a merge on k's device, each of its expected shape.
std::vector<Tensor> f32_inputs(const Kernels& k, std::span<const Tensor> xs,
                               std::span<const Shape> shapes, const std::string& who) {
  std::vector<Tensor> out;
  out.reserve(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    Tensor x = detail::as_f32(k, xs[i], who, "input");
    detail::require_f32_shape(k, x, shapes[i], who, "input");
    out.push_back(std::move(x));
  }
  return out;
}

std::vector<Shape> shapes_of(std::span<const Tensor> xs) {
  std::vector<Shape> out;
  for (const Tensor& x : xs) out.push_back(x.shape());
  return out;
}

// Elements of dimensions [begin, end) of s.
std::int64_t product(const Shape& s, std::size_t begin, std::size_t end) {
  std::int64_t r = 1;
  for (std::size_t i = begin; i < end; ++i) r *= s[i];
  return r;
}

}  // namespace

MergeLayer::MergeLayer(int arity) : arity_(arity) {
  if (arity < 2) {
    throw std::invalid_argument("merge layer: needs at least 2 inputs, got " +
                                std::to_string(arity));
  }
}

void MergeLayer::single_input() const {
  throw std::logic_error(describe() + ": reads " + std::to_string(arity_) +
                         " tensors (use the *_n calls)");
}

Shape MergeLayer::output_shape(const Shape& /*input*/) const {
  single_input();
}

ForwardResult MergeLayer::forward(const Context& /*ctx*/, ParamView /*params*/,
                                  const Tensor& /*x*/) const {
  single_input();
}

Tensor MergeLayer::backward_input(const Context& /*ctx*/, ParamView /*params*/, Saved& /*saved*/,
                                  const Tensor& /*dy*/) const {
  single_input();
}

void MergeLayer::require_inputs(std::span<const Shape> inputs) const {
  if (static_cast<int>(inputs.size()) != arity_) {
    throw std::invalid_argument(describe() + ": reads " + std::to_string(arity_) +
                                " tensors, got " + std::to_string(inputs.size()));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].size() < 2 || inputs[i][0] != inputs[0][0]) {
      throw std::invalid_argument(describe() + ": input " + std::to_string(i) + " has shape " +
                                  shape_str(inputs[i]) + "; inputs need a batch dimension " +
                                  "and one more, with the batch of input 0 " +
                                  shape_str(inputs[0]));
    }
  }
}

void MergeLayer::require_equal_shapes(std::span<const Shape> inputs) const {
  require_inputs(inputs);
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i] != inputs[0]) {
      throw std::invalid_argument(describe() + ": input " + std::to_string(i) + " has shape " +
                                  shape_str(inputs[i]) + ", input 0 " + shape_str(inputs[0]) +
                                  " (" + kind() + " needs equal shapes)");
    }
  }
}

std::vector<Tensor> MergeLayer::checked_inputs(const Kernels& k, std::span<const Tensor> xs) const {
  const std::vector<Shape> shapes = shapes_of(xs);
  (void)output_shape_n(shapes);  // throws naming the input that does not fit
  return f32_inputs(k, xs, shapes, describe());
}

// ---- add ----

std::string AddLayer::describe() const {
  return "add(" + std::to_string(arity()) + ")";
}

Shape AddLayer::output_shape_n(std::span<const Shape> inputs) const {
  require_equal_shapes(inputs);
  return inputs[0];
}

ForwardResult AddLayer::forward_n(const Context& ctx, ParamView /*params*/,
                                  std::span<const Tensor> xs) const {
  const Kernels& k = ctx.k();
  const std::vector<Tensor> x = checked_inputs(k, xs);
  ForwardResult r;
  r.y = k.empty(output_shape_n(shapes_of(xs)));
  k.add(detail::ptr(x[0]), detail::ptr(x[1]), detail::ptr(r.y), r.y.numel());
  for (std::size_t i = 2; i < x.size(); ++i) {
    k.add(detail::ptr(r.y), detail::ptr(x[i]), detail::ptr(r.y), r.y.numel());
  }
  return r;
}

std::vector<Tensor> AddLayer::backward_input_n(const Context& /*ctx*/, ParamView /*params*/,
                                               Saved& /*saved*/, const Tensor& dy,
                                               const std::vector<bool>& want) const {
  std::vector<Tensor> dx(static_cast<std::size_t>(arity()));
  for (std::size_t i = 0; i < dx.size(); ++i) {
    if (i < want.size() && want[i]) dx[i] = dy;  // shared: the caller never writes it in place
  }
  return dx;
}

// ---- concat ----

ConcatLayer::ConcatLayer(std::vector<std::int64_t> widths, int axis)
    : MergeLayer(static_cast<int>(widths.size())), widths_(std::move(widths)), axis_(axis) {
  for (const std::int64_t w : widths_) {
    if (w <= 0) throw std::invalid_argument("concat: widths must be positive");
    total_ += w;
  }
  if (axis == 0) throw std::invalid_argument("concat: axis 0 is the batch");
}

std::string ConcatLayer::describe() const {
  std::string s = "concat(";
  for (std::size_t i = 0; i < widths_.size(); ++i) {
    if (i > 0) s += '+';
    s += std::to_string(widths_[i]);
  }
  if (axis_ != -1) s += ", axis " + std::to_string(axis_);
  return s + ")";
}

std::size_t ConcatLayer::dimension(std::size_t rank) const {
  const auto r = static_cast<int>(rank);
  const int d = axis_ < 0 ? r + axis_ : axis_;
  if (d < 1 || d >= r) {
    throw std::invalid_argument(describe() + ": axis " + std::to_string(axis_) +
                                " is not a dimension past the batch of a rank-" +
                                std::to_string(rank) + " input");
  }
  return static_cast<std::size_t>(d);
}

Shape ConcatLayer::output_shape_n(std::span<const Shape> inputs) const {
  require_inputs(inputs);
  const std::size_t d = dimension(inputs[0].size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    bool fits = inputs[i].size() == inputs[0].size() && inputs[i][d] == widths_[i];
    for (std::size_t j = 0; fits && j < inputs[i].size(); ++j) {
      fits = j == d || inputs[i][j] == inputs[0][j];
    }
    if (!fits) {
      throw std::invalid_argument(
          describe() + ": input " + std::to_string(i) + " has shape " + shape_str(inputs[i]) +
          ", expected " + std::to_string(widths_[i]) + " at dimension " + std::to_string(d) +
          " and the other dimensions of input 0 " + shape_str(inputs[0]));
    }
  }
  Shape out = inputs[0];
  out[d] = total_;
  return out;
}

// Each input is a [rows, width * inner] matrix (rows: the dimensions before the joined one,
// inner: those after), and the output the matrices side by side: one strided copy each.
ForwardResult ConcatLayer::forward_n(const Context& ctx, ParamView /*params*/,
                                     std::span<const Tensor> xs) const {
  const Kernels& k = ctx.k();
  const std::vector<Tensor> x = checked_inputs(k, xs);
  ForwardResult r;
  r.y = k.empty(output_shape_n(shapes_of(xs)));
  const Shape& s = r.y.shape();
  const std::size_t d = dimension(s.size());
  const std::int64_t rows = product(s, 0, d);
  const std::int64_t inner = product(s, d + 1, s.size());
  std::int64_t at = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::int64_t cols = widths_[i] * inner;
    k.copy_2d(detail::ptr(x[i]), cols, detail::ptr(r.y) + at, total_ * inner, rows, cols);
    at += cols;
  }
  return r;
}

std::vector<Tensor> ConcatLayer::backward_input_n(const Context& ctx, ParamView /*params*/,
                                                  Saved& /*saved*/, const Tensor& dy,
                                                  const std::vector<bool>& want) const {
  const Kernels& k = ctx.k();
  const Tensor g = detail::as_f32(k, dy, describe(), "output gradient");
  const Shape& s = g.shape();
  const std::size_t d = dimension(s.size());
  if (s[d] != total_) {
    throw std::invalid_argument(describe() + ": output gradient " + g.describe() +
                                " does not have " + std::to_string(total_) + " at dimension " +
                                std::to_string(d));
  }
  const std::int64_t rows = product(s, 0, d);
  const std::int64_t inner = product(s, d + 1, s.size());
  std::vector<Tensor> dx(widths_.size());
  std::int64_t at = 0;
  for (std::size_t i = 0; i < widths_.size(); ++i) {
    const std::int64_t cols = widths_[i] * inner;
    if (i < want.size() && want[i]) {
      Shape part = s;
      part[d] = widths_[i];
      dx[i] = k.empty(part);
      k.copy_2d(detail::ptr(g) + at, total_ * inner, detail::ptr(dx[i]), cols, rows, cols);
    }
    at += cols;
  }
  return dx;
}

// ---- multiply ----

Shape MultiplyLayer::output_shape_n(std::span<const Shape> inputs) const {
  require_equal_shapes(inputs);
  return inputs[0];
}

ForwardResult MultiplyLayer::forward_n(const Context& ctx, ParamView /*params*/,
                                       std::span<const Tensor> xs) const {
  const Kernels& k = ctx.k();
  const std::vector<Tensor> x = checked_inputs(k, xs);
  ForwardResult r;
  r.y = k.empty(output_shape_n(shapes_of(xs)));
  k.multiply(detail::ptr(x[0]), detail::ptr(x[1]), 1.0f, 0.0f, detail::ptr(r.y), r.y.numel());
  if (ctx.keep_saved) r.saved = {x[0], x[1]};
  return r;
}

std::vector<Tensor> MultiplyLayer::backward_input_n(const Context& ctx, ParamView /*params*/,
                                                    Saved& saved, const Tensor& dy,
                                                    const std::vector<bool>& want) const {
  const Kernels& k = ctx.k();
  detail::require_saved(saved, 2, describe());
  const Tensor g = detail::as_f32(k, dy, describe(), "output gradient");
  detail::require_f32_shape(k, g, saved[0].shape(), describe(), "output gradient");
  std::vector<Tensor> dx(2);
  for (std::size_t i = 0; i < 2; ++i) {
    if (i >= want.size() || !want[i]) continue;
    dx[i] = k.empty(g.shape());
    // d(a * b)/da = b and d/db = a.
    k.multiply(detail::ptr(g), detail::ptr(saved[1 - i]), 1.0f, 0.0f, detail::ptr(dx[i]),
               g.numel());
  }
  return dx;
}

}  // namespace tandem::models
