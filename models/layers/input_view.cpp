#include "models/layers/input_view.hpp"

#include <stdexcept>

namespace tandem::models {

InputView::InputView(std::shared_ptr<const Layer> inner,
                     std::vector<std::optional<InputColumns>> views)
    : inner_(std::move(inner)), views_(std::move(views)) {
  if (inner_ == nullptr) throw std::invalid_argument("InputView: no inner layer");
}

std::string InputView::describe() const {
  std::string names;
  for (const auto& v : views_) {
    if (v) names += (names.empty() ? "" : ", ") + v->name;
  }
  return inner_->describe() + " of input " + names;
}

Shape InputView::viewed_shape(std::size_t k, const Shape& input) const {
  if (!viewed(k)) return input;
  const InputColumns& c = *views_[k];
  if (input.size() != 2 || input[1] < c.end) {
    throw std::invalid_argument(describe() + ": the packed model input has shape " +
                                shape_str(input) + ", which lacks the columns of '" + c.name + "'");
  }
  Shape s{input[0]};
  s.insert(s.end(), c.shape.begin(), c.shape.end());
  return s;
}

Tensor InputView::view(const Kernels& k, std::size_t source, const Tensor& x) const {
  if (!viewed(source)) return x;
  const InputColumns& c = *views_[source];
  const Shape shape = viewed_shape(source, x.shape());
  // i32 ids beside f32 inputs travel as exact floats (models/input_layout.hpp).
  const bool converted = x.dtype() == DType::f32 && c.dtype == DType::i32;
  if (x.dtype() != c.dtype && !converted) {
    throw std::invalid_argument(describe() + ": the packed model input is " +
                                std::string(dtype_name(x.dtype())) + ", '" + c.name + "' is " +
                                std::string(dtype_name(c.dtype)));
  }
  if (!x.device().has_data()) return Tensor::empty(shape, c.dtype, x.device());
  Tensor out = k.empty(shape, c.dtype);
  const std::int64_t rows = x.shape()[0], cols = c.end - c.begin;
  if (converted) {
    Tensor floats = k.empty(shape, DType::f32);
    k.copy_2d(static_cast<const float*>(x.raw_data()) + c.begin, x.shape()[1],
              static_cast<float*>(floats.raw_data()), cols, rows, cols);
    k.f32_to_i32(static_cast<const float*>(floats.raw_data()),
                 static_cast<std::int32_t*>(out.raw_data()), rows * cols);
    return out;
  }
  // Both dtypes are 4 bytes wide: the copy moves bits, whatever they encode.
  k.copy_2d(static_cast<const float*>(x.raw_data()) + c.begin, x.shape()[1],
            static_cast<float*>(out.raw_data()), c.end - c.begin, x.shape()[0], c.end - c.begin);
  return out;
}

Shape InputView::output_shape(const Shape& input) const {
  return inner_->output_shape(viewed_shape(0, input));
}

DType InputView::input_dtype() const {
  return viewed(0) ? views_[0]->dtype : inner_->input_dtype();
}

LayerCost InputView::cost(const Shape& input) const {
  return inner_->cost(viewed_shape(0, input));
}

ForwardResult InputView::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  return inner_->forward(ctx, params, view(ctx.k(), 0, x));
}

Tensor InputView::backward_input(const Context& ctx, ParamView params, Saved& saved,
                                 const Tensor& dy) const {
  Tensor dx = inner_->backward_input(ctx, params, saved, dy);
  return viewed(0) ? Tensor() : dx;
}

void InputView::backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                                     const GradSink& sink) const {
  inner_->backward_weight_into(ctx, saved, dy, sink);
}

Tensor InputView::backward_into(const Context& ctx, ParamView params, Saved& saved,
                                const Tensor& dy, bool need_dx, const GradSink& sink) const {
  Tensor dx = inner_->backward_into(ctx, params, saved, dy, need_dx && !viewed(0), sink);
  return viewed(0) ? Tensor() : dx;
}

Shape InputView::output_shape_n(std::span<const Shape> inputs) const {
  std::vector<Shape> shapes;
  for (std::size_t k = 0; k < inputs.size(); ++k) shapes.push_back(viewed_shape(k, inputs[k]));
  return inner_->output_shape_n(shapes);
}

ForwardResult InputView::forward_n(const Context& ctx, ParamView params,
                                   std::span<const Tensor> xs) const {
  std::vector<Tensor> viewed_xs;
  for (std::size_t k = 0; k < xs.size(); ++k) viewed_xs.push_back(view(ctx.k(), k, xs[k]));
  return inner_->forward_n(ctx, params, viewed_xs);
}

std::vector<Tensor> InputView::backward_input_n(const Context& ctx, ParamView params, Saved& saved,
                                                const Tensor& dy,
                                                const std::vector<bool>& want) const {
  std::vector<bool> inner_want = want;
  for (std::size_t k = 0; k < inner_want.size(); ++k) inner_want[k] = want[k] && !viewed(k);
  return inner_->backward_input_n(ctx, params, saved, dy, inner_want);
}

}  // namespace tandem::models
