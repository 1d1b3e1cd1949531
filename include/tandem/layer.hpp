#pragma once
// Part of Tandem's public API (docs/embedding.md): the base class of a layer written by an
// application, and what its calls take and return. Tandem adapts such a layer into its own
// layers (api/custom_layer.hpp), so a model mixes it freely with the built-in ones.
//
// The contract:
//  - A layer holds no weights: parameters come in with every call, in the order of
//    param_specs(), so a backward can run against the weight version its forward used (weight
//    stashing) and the input and weight gradients can run apart (zero-bubble schedules).
//  - A layer is immutable and safe to call from several threads at once.
//  - Every tensor it receives (input, parameters, saved, gradients) is f32 on the device of
//    the stage it runs on, the device of ctx.k(). It computes through ctx.k() (tandem/
//    kernels.hpp) and allocates what it returns or keeps through ctx.k().empty / zeros; written
//    that way it runs on every device. Tensor::data<T>() works on cpu tensors only: on another
//    device it throws, and the run fails with an error that names the layer. raw_data() is the
//    address on the tensor's own device: never dereference it on the host for a device tensor.
//  - An exception from any member ends the run; Tandem reports it prefixed with the layer's
//    index and describe().
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dtype.hpp"
#include "kernels.hpp"
#include "tensor.hpp"

namespace tandem {

// Per-call settings. The forward and the backward of one slice get the same context.
struct LayerContext {
  bool training = true;    // dropout active (evaluation passes false)
  std::uint64_t seed = 0;  // the step's seed, for layers that draw random numbers
  // Index of the slice's first sample within its minibatch, so that random draws keyed by
  // (seed, sample) do not depend on how a minibatch is sliced.
  std::int64_t sample_begin = 0;
  // Forward keeps in ForwardResult::saved what backward needs only when this is true (false
  // for evaluation and for a forward that is recomputed later).
  bool keep_saved = true;
  // The kernels of the stage's device; null stands for Kernels::cpu().
  const Kernels* kernels = nullptr;

  const Kernels& k() const { return kernels != nullptr ? *kernels : Kernels::cpu(); }
};

// What a forward keeps for its backward.
using Saved = std::vector<Tensor>;

// How saved tensor k maps to the samples of the forward that made it, so that Tandem can cut a
// forward's state into slices or join slices (UMPIPE slices a stage's backward differently
// from its forward).
enum class SavedLayout : std::uint8_t {
  // Dimension 0 holds the samples in order, the same number of rows each ([batch, ...] or
  // [batch * tokens, ...]).
  rows,
  // Depends on the whole batch at once: schedules that re-slice a backward refuse the layer.
  not_splittable,
};

struct ForwardResult {
  Tensor y;
  Saved saved;
};

// The layer's parameters, in the order of its param_specs().
using ParamView = std::span<const Tensor>;

enum class ParamInit : std::uint8_t {
  zeros,
  ones,
  normal,          // N(0, scale^2)
  uniform_fan_in,  // U(-b, b), b = scale / sqrt(fan_in) (PyTorch's Linear default at scale 1)
};

struct ParamSpec {
  std::string name;  // local to its layer: "weight", "bias"
  Shape shape;
  ParamInit init = ParamInit::zeros;
  float scale = 1.0f;
  std::int64_t fan_in = 1;  // for uniform_fan_in
};

// Where weight gradients go: grads[i] = alpha * dL/dp_i + beta * grads[i] for every parameter
// i (tensors of the parameters' shapes, on the layer's device). beta = 0 writes fresh
// gradients: the old contents may be garbage and must not be read (Kernels::gemm and the sums
// take alpha and beta for this). grads may be the parameters themselves (a fused update), so a
// layer computes everything it needs from its parameters before it writes any of grads.
struct GradSink {
  std::span<Tensor> grads;
  float alpha = 1.0f;
  float beta = 0.0f;
};

// FLOPs of one pass over an input of the given shape (multiply-add = 2 FLOPs, GEMM-like work
// only), which Tandem's planner and simulator use.
struct LayerCost {
  double forward_flops = 0;
  double backward_input_flops = 0;
  double backward_weight_flops = 0;
};

class Layer {
 public:
  virtual ~Layer() = default;

  virtual std::string kind() const = 0;      // "residual"
  virtual std::string describe() const = 0;  // "residual(32)"
  virtual std::vector<ParamSpec> param_specs() const { return {}; }
  // The output shape for an input shape; throws std::invalid_argument (naming the layer and
  // the shape) when the input does not fit.
  virtual Shape output_shape(const Shape& input) const = 0;
  virtual DType input_dtype() const { return DType::f32; }
  virtual DType output_dtype() const { return DType::f32; }
  virtual LayerCost cost(const Shape& input) const;

  // y = f(x), on x's device, of output_shape(x.shape()); keeps in `saved` what backward needs
  // when ctx.keep_saved.
  virtual ForwardResult forward(const LayerContext& ctx, ParamView params,
                                const Tensor& x) const = 0;
  // dx from dy (dy of y's shape, dx of x's). May append to `saved` what backward_weight_into
  // needs (then weight_needs_backward_input() says true).
  virtual Tensor backward_input(const LayerContext& ctx, ParamView params, Saved& saved,
                                const Tensor& dy) const = 0;
  // The weight gradients, into sink (see GradSink). Every layer with parameters overrides it;
  // the default throws std::logic_error for one that has some.
  virtual void backward_weight_into(const LayerContext& ctx, const Saved& saved, const Tensor& dy,
                                    const GradSink& sink) const;

  // Layout of saved tensor k; the default says rows.
  virtual SavedLayout saved_layout(std::size_t k) const;
  virtual bool weight_needs_backward_input() const { return false; }

  std::int64_t param_numel() const;  // values in all parameters
};

using LayerPtr = std::shared_ptr<const Layer>;

// A loss written by an application (Model::with_loss), on the last layer's output. Tandem adds
// up value() over a minibatch's slices and reports the mean over the target elements, and
// scales gradient() so that the slices' gradients add up to the gradient of that mean
// (api/custom_loss.cpp). The layer contract holds here too: immutable, safe from several
// threads, computing through ctx.k() on the device of the last stage; an exception, or a
// result of the wrong shape, dtype or device, ends the run with an error naming describe().
// Such a loss reports no accuracy.
class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string describe() const = 0;  // "huber(delta=1)"
  // The targets it reads for an output of this shape; by default f32 of the output's shape.
  virtual DType target_dtype() const { return DType::f32; }
  virtual Shape target_shape(const Shape& output) const { return output; }
  // The loss of every target element: f32, targets.numel() values (any shape).
  virtual Tensor value(const LayerContext& ctx, const Tensor& output,
                       const Tensor& targets) const = 0;
  // The gradient of the sum of value() with respect to output: f32 of output's shape.
  virtual Tensor gradient(const LayerContext& ctx, const Tensor& output,
                          const Tensor& targets) const = 0;
};

using LossPtr = std::shared_ptr<const Loss>;

}  // namespace tandem
