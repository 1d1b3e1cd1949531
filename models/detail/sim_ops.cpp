#include "models/detail/sim_ops.hpp"

#include <stdexcept>

#include "models/sim_clock.hpp"

namespace tandem::models::detail {
namespace {

SimClock& clock_of(const Context& ctx, const OpDevices& op) {
  if (ctx.sim_clock == nullptr) {
    throw std::invalid_argument(op.op() +
                                ": sim tensors need a SimClock in the context (ctx.sim_clock)");
  }
  return *ctx.sim_clock;
}

// SimClock::charge, with the op's name built only when it throws.
void charge(SimClock& clock, double ms, const OpDevices& op) {
  if (!SimClock::valid(ms)) (void)clock.charge(ms, op.op());
  (void)clock.charge(ms, {});
}

void require_shapes(std::span<const Tensor> ts, const OpDevices& op, const char* what) {
  const std::vector<ParamSpec>& specs = op.specs();
  if (ts.size() != specs.size()) {
    throw std::invalid_argument(op.op() + ": expects " + std::to_string(specs.size()) + " " + what +
                                " tensors, got " + std::to_string(ts.size()));
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (ts[i].shape() != specs[i].shape || ts[i].dtype() != DType::f32) {
      throw std::invalid_argument(op.op() + ": " + what + " '" + specs[i].name + "' must be f32" +
                                  shape_str(specs[i].shape) + ", got " + ts[i].describe());
    }
  }
}

// The input gradient of a sim backward (shared by the fused and the split paths, so that they
// check and charge the same).
Tensor sim_dx(const OpDevices& op, SimClock& clock, ParamView params, const Saved& saved,
              const Tensor& dy, bool need_dx) {
  require_shapes(params, op, "parameter");
  if (saved.empty() || !saved.front().defined()) {
    throw std::invalid_argument(op.op() +
                                ": backward needs the saved input, got none (forward run "
                                "without ctx.keep_saved?)");
  }
  const Tensor& x = saved.front();
  const Shape y_shape = op.layer().output_shape(x.shape());
  if (!dy.defined() || dy.shape() != y_shape) {
    throw std::invalid_argument(op.op() + ": output gradient must have shape " +
                                shape_str(y_shape) + ", got " + dy.describe());
  }
  Tensor dx;
  // Token ids have no gradient (as Embedding::backward_input).
  if (need_dx && x.dtype() != DType::i32) {
    dx = Tensor::empty(x.shape(), DType::f32, Device::sim());
    charge(clock, clock.costs().backward_input(op.index()), op);
  }
  return dx;
}

}  // namespace

void OpDevices::add(Role role, const Tensor& t, std::size_t k) {
  if (!t.defined()) return;
  if (first_ == nullptr) {
    first_ = &t;
    first_role_ = role;
    first_k_ = k;
    return;
  }
  if (t.device().is_sim() != first_->device().is_sim()) {
    throw std::invalid_argument(op() + ": " + label(role, k) + " is " + t.describe() + " but " +
                                label(first_role_, first_k_) + " is " + first_->describe() +
                                " (sim and data tensors cannot be mixed in one op)");
  }
}

void OpDevices::add(Role role, std::span<const Tensor> ts) {
  for (std::size_t k = 0; k < ts.size(); ++k) add(role, ts[k], k);
}

std::string OpDevices::op() const {
  return "Model::" + std::string(op_) + " layer " + std::to_string(index_) + " (" +
         layer_.describe() + ")";
}

std::string OpDevices::label(Role role, std::size_t k) const {
  auto param_name = [&] {
    return k < specs_.size() ? "'" + specs_[k].name + "'" : std::to_string(k);
  };
  switch (role) {
    case Role::input:
      return "input";
    case Role::output_gradient:
      return "output gradient";
    case Role::parameter:
      return "parameter " + param_name();
    case Role::gradient:
      return "gradient " + param_name();
    case Role::saved:
      return "saved tensor " + std::to_string(k);
  }
  return "tensor";
}

ForwardResult sim_forward(const OpDevices& op, const Context& ctx, ParamView params,
                          const Tensor& x) {
  SimClock& clock = clock_of(ctx, op);
  require_shapes(params, op, "parameter");
  const Layer& layer = op.layer();
  const DType want = layer.input_dtype();
  if (x.dtype() != want && !(want == DType::f32 && x.dtype() == DType::bf16)) {
    throw std::invalid_argument(op.op() + ": input must be " + std::string(dtype_name(want)) +
                                ", got " + x.describe());
  }
  ForwardResult r;
  r.y = Tensor::empty(layer.output_shape(x.shape()), layer.output_dtype(), Device::sim());
  if (ctx.keep_saved) r.saved.push_back(x);
  charge(clock, clock.costs().forward(op.index()), op);
  return r;
}

ForwardResult sim_forward_n(const OpDevices& op, const Context& ctx, std::span<const Tensor> xs) {
  SimClock& clock = clock_of(ctx, op);
  std::vector<Shape> shapes;
  for (const Tensor& x : xs) shapes.push_back(x.shape());
  ForwardResult r;
  r.y = Tensor::empty(op.layer().output_shape_n(shapes), op.layer().output_dtype(), Device::sim());
  if (ctx.keep_saved) r.saved.assign(xs.begin(), xs.end());
  charge(clock, clock.costs().forward(op.index()), op);
  return r;
}

std::vector<Tensor> sim_backward_input_n(const OpDevices& op, const Context& ctx,
                                         const Saved& saved, const Tensor& dy,
                                         const std::vector<bool>& want) {
  SimClock& clock = clock_of(ctx, op);
  if (saved.size() != want.size()) {
    throw std::invalid_argument(op.op() + ": backward needs the " + std::to_string(want.size()) +
                                " saved inputs, got " + std::to_string(saved.size()) +
                                " (forward run without ctx.keep_saved?)");
  }
  std::vector<Shape> shapes;
  for (const Tensor& x : saved) shapes.push_back(x.shape());
  const Shape y_shape = op.layer().output_shape_n(shapes);
  if (!dy.defined() || dy.shape() != y_shape) {
    throw std::invalid_argument(op.op() + ": output gradient must have shape " +
                                shape_str(y_shape) + ", got " + dy.describe());
  }
  std::vector<Tensor> dx(want.size());
  bool any = false;
  for (std::size_t k = 0; k < want.size(); ++k) {
    if (!want[k]) continue;
    dx[k] = Tensor::empty(saved[k].shape(), DType::f32, Device::sim());
    any = true;
  }
  if (any) charge(clock, clock.costs().backward_input(op.index()), op);
  return dx;
}

Tensor sim_backward(const OpDevices& op, const Context& ctx, ParamView params, const Saved& saved,
                    const Tensor& dy, bool need_dx, const GradSink& sink) {
  SimClock& clock = clock_of(ctx, op);
  require_shapes(sink.grads, op, "gradient");
  Tensor dx = sim_dx(op, clock, params, saved, dy, need_dx);
  charge(clock, clock.costs().backward_weight(op.index()), op);
  return dx;
}

Tensor sim_backward_input(const OpDevices& op, const Context& ctx, ParamView params, Saved& saved,
                          const Tensor& dy, bool need_dx) {
  SimClock& clock = clock_of(ctx, op);
  Tensor dx = sim_dx(op, clock, params, saved, dy, need_dx);
  saved.resize(1);  // drop the dy of an earlier B
  saved.push_back(dy);
  return dx;
}

void sim_backward_weight(const OpDevices& op, const Context& ctx, const Saved& saved,
                         const GradSink& sink) {
  SimClock& clock = clock_of(ctx, op);
  require_shapes(sink.grads, op, "gradient");
  // {input, output gradient}; a merge with weights keeps each of its inputs.
  const auto inputs = static_cast<std::size_t>(op.layer().arity());
  bool fits = saved.size() == inputs + 1;
  std::vector<Shape> shapes;
  for (std::size_t k = 0; fits && k < saved.size(); ++k) {
    fits = saved[k].defined();
    if (k < inputs) shapes.push_back(saved[k].shape());
  }
  if (!fits || saved.back().shape() != op.layer().output_shape_n(shapes)) {
    throw std::invalid_argument(op.op() +
                                ": weight gradient needs the state of backward_input "
                                "({input, output gradient}), got " +
                                std::to_string(saved.size()) + " saved tensors");
  }
  charge(clock, clock.costs().backward_weight(op.index()), op);
}

}  // namespace tandem::models::detail
