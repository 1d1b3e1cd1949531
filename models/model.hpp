#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/layer.hpp"
#include "models/loss.hpp"
#include "models/model_spec.hpp"
#include "models/param_set.hpp"
#include "models/tied_params.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models {

// An ordered list of layers (the planner cuts it into stages) followed by a loss on the last
// layer's output (ModelSpec::loss, or an application's). Immutable; copies share the layers.
//
// Each layer reads the previous layer's output (a chain), or, in a graph model, the tensors its
// `sources` name: the model input or any earlier layer's output. A range of layers [begin, end)
// (a stage) then reads range_inputs() from outside and gives range_outputs() to later ranges;
// for a chain those are the layer before the range and its last layer.
//
// Parameters are named "<layer index>.<local name>" ("3.weight"), so the parameter sets of
// stages [0, k) and [k, n) merge into the whole model's, and the values a layer gets from
// init_params do not depend on which range is initialised.
class Model {
 public:
  // Throws std::invalid_argument naming the spec field that is wrong.
  static Model build(const ModelSpec& spec);
  // `sources[i]`: what layer i reads, in order (kModelInput or an earlier layer), as many as its
  // arity(); empty for a chain. Throws std::invalid_argument naming the layer when a source is
  // not earlier, the count is not the arity, or a layer's output (but the last's) is never read.
  // `implied_ties`: ties the model kind itself makes (the GPT's tie_embeddings), joined to
  // spec.ties; a bad tie throws std::invalid_argument naming it (models/tied_params.hpp).
  Model(ModelSpec spec, std::vector<std::shared_ptr<const Layer>> layers,
        std::vector<std::vector<int>> sources = {},
        std::vector<std::vector<std::string>> implied_ties = {});

  // ---- edges ----
  static constexpr int kModelInput = -1;
  bool is_chain() const { return chain_; }
  const std::vector<int>& sources(int layer) const;
  // The layers reading layer `producer`'s output (kModelInput: the model input), ascending.
  const std::vector<int>& consumers(int producer) const;
  // What layers [begin, end) read from outside: kModelInput first when they read it, then the
  // earlier layers, ascending. Never empty for a non-empty range.
  std::vector<int> range_inputs(int begin, int end) const;
  // The layers of [begin, end) whose outputs layers at or after `end` read, ascending, plus the
  // model's last layer when the range holds it (the loss reads it). Ends with end - 1.
  std::vector<int> range_outputs(int begin, int end) const;

  const ModelSpec& spec() const { return spec_; }
  // The tied parameters, each group's copies in ascending layer order.
  const std::vector<TieGroup>& ties() const { return ties_; }
  const Loss& loss() const { return *loss_; }
  // This model with another loss (an application's); spec().loss becomes its name.
  Model with_loss(LossPtr loss) const;
  // This model with more tied parameters: `ties` (each "<layer index>.<parameter>" names, as
  // ModelSpec::ties) joins spec().ties. Throws std::invalid_argument naming the tie as the
  // constructor does (an unknown name, one tied twice, shapes that differ).
  Model with_ties(const std::vector<std::vector<std::string>>& ties) const;
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const Layer& layer(int i) const;
  std::string describe() const;  // one line per layer

  // Inputs and targets of a minibatch of `batch` samples.
  Shape input_shape(std::int64_t batch) const;
  DType input_dtype() const;
  Shape target_shape(std::int64_t batch) const;
  DType target_dtype() const { return loss_->target_dtype(); }
  // Output shape of every layer for a minibatch (entry i = output of layer i).
  std::vector<Shape> activation_shapes(std::int64_t batch) const;
  // The shape of each layer's first input (what its cost() is asked about).
  std::vector<Shape> input_shapes(std::int64_t batch) const;
  // Per cut after layer i (i < n - 1): the elements of every tensor that crosses it, i.e. made
  // at or before layer i (the model input included) and read after it; for a chain, layer i's
  // output. Entry n - 1 is the last layer's output. What a stage ending at layer i sends on
  // when every tensor is relayed, and what a planner charges on a link at that cut.
  std::vector<double> cut_elements(std::int64_t batch) const;

  // Deterministic initialisation of layers [begin, end) (default: all). On the sim device the
  // parameters have shapes and no data.
  ParamSet init_params(std::uint64_t seed, Device device = Device::cpu()) const;
  ParamSet init_params(std::uint64_t seed, int begin, int end, Device device = Device::cpu()) const;
  std::string param_name(int layer, const std::string& local) const;
  // Layer i's parameters within a set that contains them (in its param_specs() order).
  ParamView layer_params(const ParamSet& params, int layer) const;
  std::span<Tensor> layer_params(ParamSet& params, int layer) const;

  // ---- buffers (ParamSpec::trainable false: batch norm's running statistics) ----
  bool has_buffers() const { return !buffers_.empty(); }
  // Whether `name` ("<layer index>.<local name>") is a buffer: optimizers leave it alone and
  // gradient norms skip its slot.
  bool is_buffer(std::string_view name) const;
  // Each layer holding buffers whose parameters are all in `params` updates them from their
  // gradient slots in `grads` (same names; Layer::update_buffers), through k. A buffer's tensor
  // that shares storage with another handle (a stashed weight version) is replaced in `params`
  // by a new one, as optimizers do (copy-on-write). Layers not in `params` are skipped: a stage
  // passes its own set. Called once per optimizer step, by the optimizer (Optimizer::attach).
  void update_buffers(const Kernels& k, ParamSet& params, const ParamSet& grads) const;

  // Forward of layers [begin, end) on x; keeps each layer's saved state when ctx.keep_saved
  // (else `saved` holds one empty state per layer).
  //
  // On the sim device (x and the parameters all sim tensors) nothing is computed: each layer
  // makes a sim output of its output shape and charges its configured duration to
  // ctx.sim_clock (see SimCosts); backward likewise makes sim input gradients and leaves
  // `grads` untouched. An op that mixes sim and data tensors throws std::invalid_argument
  // naming the op, the layer and both tensors.
  struct RangeForward {
    Tensor y;                     // the output of layer end - 1
    std::vector<Saved> saved;     // one per layer of the range
    std::vector<Tensor> outputs;  // graph ranges: one per range_outputs(), y last
  };
  // x is the range's one input (throws std::invalid_argument when it reads several).
  RangeForward forward(const Context& ctx, const ParamSet& params, const Tensor& x, int begin,
                       int end) const;
  // Any range: `inputs` holds one tensor per range_inputs(), in that order.
  RangeForward forward(const Context& ctx, const ParamSet& params, std::span<const Tensor> inputs,
                       int begin, int end) const;
  // Backward of layers [begin, end) (fused B+W per layer), from the gradient of the range's
  // output; returns the gradient of its input when need_dx. Gradients go to `grads` (a set with
  // the range's parameter names) as grads = alpha * g + beta * grads (grads may be `params`
  // itself for a fused SGD step). Each layer's saved state is released once its backward ran.
  Tensor backward(const Context& ctx, const ParamSet& params, std::vector<Saved>& saved,
                  const Tensor& dy, int begin, int end, bool need_dx, ParamSet& grads,
                  float alpha = 1.0f, float beta = 0.0f) const;

  // Any range: `dys` holds the gradient of each range_outputs() tensor, in order; returns the
  // gradient of each range_inputs() tensor (undefined for the model input). A tensor read by
  // several layers gets their gradients summed, the later reader's first (so that a range
  // sums them in the order the whole model does).
  std::vector<Tensor> backward(const Context& ctx, const ParamSet& params,
                               std::vector<Saved>& saved, std::span<const Tensor> dys, int begin,
                               int end, ParamSet& grads, float alpha = 1.0f,
                               float beta = 0.0f) const;
  std::vector<Tensor> backward_input(const Context& ctx, const ParamSet& params,
                                     std::vector<Saved>& saved, std::span<const Tensor> dys,
                                     int begin, int end) const;

  // Input gradient of layers [begin, end) from the gradient of the range's output (B of a split
  // backward); keeps in `saved` what backward_weight needs (each layer's output gradient,
  // composite layers' intermediates). Returns dx when need_dx. Layers without parameters
  // release their state here. dy is kept by reference (a handle): do not write it before W.
  Tensor backward_input(const Context& ctx, const ParamSet& params, std::vector<Saved>& saved,
                        const Tensor& dy, int begin, int end, bool need_dx) const;
  // Weight gradients of layers [begin, end) (W of a split backward), after backward_input on
  // the same saved state; grads = alpha * g + beta * grads; releases the saved state. Together
  // with backward_input it equals `backward` bit for bit, and on sim tensors charges the same
  // durations (backward_input_ms in B, backward_weight_ms here).
  void backward_weight(const Context& ctx, std::vector<Saved>& saved, int begin, int end,
                       ParamSet& grads, float alpha = 1.0f, float beta = 0.0f) const;

  // The saved state of layers [begin, end) restricted to samples [lo, hi) of a forward over
  // `batch` samples (views sharing storage where the layout allows), as if the forward had run
  // on those samples alone with ctx.sample_begin moved by lo. Works on the state of a forward
  // and on that of backward_input. Each tensor is cut by its layer's saved_layout (sim states
  // are {input[, dy]}: rows). Throws std::invalid_argument naming the layer and tensor when a
  // tensor does not fit the layout or the batch.
  std::vector<Saved> slice_saved(const std::vector<Saved>& saved, int begin, int end,
                                 std::int64_t batch, std::int64_t lo, std::int64_t hi) const;
  // The saved states of consecutive slices (in sample order, with their sample counts) joined
  // as if one forward had run over all of them (rows are copied, except for a single part).
  // Throws when the parts do not fit together (different layouts, dropout records of
  // non-adjacent slices or other steps). Rows are copied through `k` (a device's copies are
  // ordered after the work that wrote the parts).
  std::vector<Saved> concat_saved(std::span<const std::vector<Saved>> parts,
                                  std::span<const std::int64_t> batches, int begin, int end,
                                  const Kernels& k = cpu_kernels()) const;

 private:
  ModelSpec spec_;
  LossPtr loss_;
  std::vector<std::shared_ptr<const Layer>> layers_;
  // Each layer's parameter names in a ParamSet ("3.w"), made once: layer_params runs for every
  // layer of every action, and building them there cost a vector of specs and a string each.
  std::vector<std::vector<std::string>> param_names_;
  // Each layer's param_specs(), built once: the sim ops check against them on every call.
  std::vector<std::vector<ParamSpec>> param_specs_;
  std::vector<TieGroup> ties_;
  // The buffers' names, sorted (is_buffer), and the layers that hold any, ascending.
  std::vector<std::string> buffers_;
  std::vector<int> buffer_layers_;

  std::int64_t first_param(const ParamSet& params, int i) const;
  void link(std::vector<std::vector<int>> sources);
  // Whether the layer-by-layer loop of the one-tensor calls runs [begin, end) as it is: a chain,
  // or one layer of one input.
  bool plain_range(int begin, int end) const;
  // dy as the gradients of a range that reads one tensor and gives one; throws otherwise.
  std::span<const Tensor> single(const Tensor& dy, int begin, int end) const;
  // The general backward of a graph range; `split`: B of a split backward (W later).
  std::vector<Tensor> graph_backward(const Context& ctx, const ParamSet& params,
                                     std::vector<Saved>& saved, std::span<const Tensor> dys,
                                     int begin, int end, ParamSet* grads, float alpha, float beta,
                                     bool split) const;
  // Layer i's backward inside graph_backward: the gradient of each of its sources.
  std::vector<Tensor> layer_backward(const Context& ctx, const ParamSet& params, Saved& s,
                                     const Tensor& g, int i, ParamSet* grads, float alpha,
                                     float beta, bool split) const;
  // W of layer i on the state B left ({..., output gradient}), into grads.
  void layer_weight(const Context& ctx, Saved& s, int i, ParamSet& grads, float alpha,
                    float beta) const;

  bool chain_ = true;
  std::vector<std::vector<int>> sources_;    // per layer
  std::vector<std::vector<int>> consumers_;  // per layer, then the model input's last
};

}  // namespace tandem::models
