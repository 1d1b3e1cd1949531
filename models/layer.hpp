#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/kernels/kernels.hpp"
#include "models/param_set.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models {

class SimClock;

// Per-call settings. Forward and backward of one slice must get the same context.
struct Context {
  bool training = true;    // dropout active (and nothing else: see keep_saved)
  std::uint64_t seed = 0;  // step seed: dropout masks depend only on (seed, layer, sample, element)
  std::int64_t sample_begin = 0;  // index of the slice's first sample within its minibatch, so
                                  // that slicing a minibatch never changes its dropout masks
  // Ops on sim tensors (Model::forward/backward) charge their configured durations here; it
  // must be set for them and is ignored otherwise.
  SimClock* sim_clock = nullptr;
  // Forward keeps what backward needs. False for evaluation, and for a re-materialized forward
  // that keeps only the stage input (its backward first recomputes the forward with this true;
  // seed and sample_begin the same, so dropout masks repeat exactly). Last, so that the
  // positional {training, seed, sample_begin} initialisers keep their meaning.
  bool keep_saved = true;
  // The kernels every layer op allocates and computes through; null means the CPU's. Pointing
  // it at another device's kernels moves a layer's work there without changing the layer.
  // Last for the same reason as keep_saved.
  const Kernels* kernels = nullptr;

  const Kernels& k() const { return kernels != nullptr ? *kernels : cpu_kernels(); }
};

// What a forward pass keeps for its backward (activations, masks). Layers built from
// sub-layers (the transformer block) also append intermediate gradients to it in
// backward_input, for a later backward_weight.
using Saved = std::vector<Tensor>;

// How one tensor of a layer's Saved maps to the samples of the forward that made it, so that
// the state of a forward over a minibatch can be cut into slices and slices joined
// (Model::slice_saved / concat_saved: UMPIPE slices a stage's backward differently from its
// forward).
enum class SavedLayout : std::uint8_t {
  // Dimension 0 holds the samples in order, the same number of rows each: [batch, ...] or
  // [batch * tokens, ...] (rows per sample = dim 0 / batch).
  rows,
  // detail::encode_shape of a tensor whose dimension 0 is the batch.
  shape_record,
  // detail::encode_dropout: the first sample moves with the slice, the key stays.
  dropout_record,
  // Depends on the whole batch at once: slicing throws.
  not_splittable,
};

struct ForwardResult {
  Tensor y;
  Saved saved;
};

// A layer's parameters, in the order of its param_specs().
using ParamView = std::span<const Tensor>;

// Where weight gradients go: grads[i] = alpha * dL/dp_i + beta * grads[i], for every parameter
// i of the layer (tensors allocated by the caller with the parameters' shapes). beta = 0 writes
// fresh gradients (prior contents are never read); beta = 1 accumulates over slices;
// grads = the parameters themselves with alpha = -lr, beta = 1 - lr * weight_decay is a fused
// SGD step. A layer computes its input gradient before it writes any of `grads`, so they may
// alias its parameters.
struct GradSink {
  std::span<Tensor> grads;
  float alpha = 1.0f;
  float beta = 0.0f;
};

struct BackwardResult {
  Tensor dx;                  // undefined when not requested
  std::vector<Tensor> grads;  // one per parameter
};

// FLOPs of one pass over an input of the given shape (multiply-add = 2 FLOPs, GEMM-like work
// only; element-wise work is memory bound and not counted).
struct LayerCost {
  double forward_flops = 0;
  double backward_input_flops = 0;
  double backward_weight_flops = 0;
};

// One element of a model's flat layer list. A layer never owns weights: parameters come in with
// each call, so a backward can run against the version its forward used (weight stashing),
// and the input gradient (B) and weight gradient (W) can run separately (zero-bubble).
// Layers are immutable and safe to call from several threads at once.
class Layer {
 public:
  virtual ~Layer() = default;

  virtual std::string kind() const = 0;      // "linear", "relu", ...
  virtual std::string describe() const = 0;  // "linear(1024->1024, relu)"
  virtual std::vector<ParamSpec> param_specs() const { return {}; }
  // Output shape for an input shape; throws std::invalid_argument (naming the layer and the
  // shape) when the input does not fit.
  virtual Shape output_shape(const Shape& input) const = 0;
  virtual DType input_dtype() const { return DType::f32; }
  virtual DType output_dtype() const { return DType::f32; }
  virtual LayerCost cost(const Shape& input) const;

  virtual ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const = 0;
  // dx from dy. May append to `saved` what backward_weight needs (composite layers only).
  virtual Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                                const Tensor& dy) const = 0;
  // Weight gradients from dy and what forward (and, for composite layers, backward_input)
  // saved. Layers without parameters do nothing.
  virtual void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                                    const GradSink& sink) const;
  // Fused B + W: returns dx when need_dx (else an undefined tensor) and writes the weight
  // gradients to sink. Must equal backward_input followed by backward_weight_into.
  virtual Tensor backward_into(const Context& ctx, ParamView params, Saved& saved, const Tensor& dy,
                               bool need_dx, const GradSink& sink) const;

  // Layout of saved tensor k (of forward's state, then what backward_input appended). Every
  // layer whose saved state is not all `rows` overrides this.
  virtual SavedLayout saved_layout(std::size_t k) const;
  // True when backward_weight_into reads what backward_input appended (composite layers), so a
  // split backward runs B even where no input gradient is wanted.
  virtual bool weight_needs_backward_input() const { return false; }

  // How many tensors the layer reads: 1, or more for the layers that merge (add, concat,
  // multiply, seq_attention). A layer of arity > 1 implements the three calls below instead of
  // output_shape, forward and backward_input (which it never gets); for arity 1 they call those.
  // It may have parameters (seq_attention): its weight gradients come from backward_weight_into
  // as for one input, after backward_input_n (Model's fused backward runs the two in turn).
  virtual int arity() const { return 1; }
  virtual Shape output_shape_n(std::span<const Shape> inputs) const;
  virtual ForwardResult forward_n(const Context& ctx, ParamView params,
                                  std::span<const Tensor> xs) const;
  // One gradient per input, in order; an undefined tensor where want[k] is false. The
  // gradients may share storage with dy or with each other (add passes dy on to every input):
  // the caller never writes them in place.
  virtual std::vector<Tensor> backward_input_n(const Context& ctx, ParamView params, Saved& saved,
                                               const Tensor& dy,
                                               const std::vector<bool>& want) const;

  // Buffers (parameters whose ParamSpec::trainable is false) are state the optimizer never
  // touches; the layer updates them here, once per optimizer step. `grads` holds what
  // backward_weight_into wrote into every parameter's gradient slot (a buffer's slot holds
  // whatever statistics the layer chose to write there, summed over the step's slices and
  // reduced over replicas like any gradient). params and grads hold all of the layer's
  // parameters in param_specs() order; the layer writes each buffer's new value into out[i]
  // (which may share storage with params[i]) and leaves the other entries of out alone.
  // Computes through k, like every layer op. Default: no buffers, nothing to do.
  virtual void update_buffers(const Kernels& k, ParamView params, std::span<const Tensor> grads,
                              std::span<Tensor> out) const;

  // Conveniences that allocate the gradients.
  std::vector<Tensor> backward_weight(const Context& ctx, const Saved& saved,
                                      const Tensor& dy) const;
  BackwardResult backward(const Context& ctx, ParamView params, Saved& saved, const Tensor& dy,
                          bool need_dx = true) const;
  std::int64_t param_count() const { return static_cast<std::int64_t>(param_specs().size()); }
  std::int64_t param_numel() const;
};

}  // namespace tandem::models
