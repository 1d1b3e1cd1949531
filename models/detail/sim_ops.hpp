#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/layer.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models::detail {

// The tensors of one layer op, gathered to decide where it runs: on the sim device when all of
// them are sim tensors, on data otherwise. Throws std::invalid_argument naming the op, the layer
// and both tensors as soon as sim and non-sim tensors meet (undefined tensors are skipped).
// Builds no string unless it throws: it runs on every layer call.
class OpDevices {
 public:
  enum class Role : std::uint8_t { input, output_gradient, parameter, gradient, saved };

  // `specs`: the layer's param_specs(), which the model keeps (a layer builds them anew on
  // every call).
  OpDevices(const char* op, int index, const Layer& layer, const std::vector<ParamSpec>& specs)
      : op_(op), index_(index), layer_(layer), specs_(specs) {}
  void add(Role role, const Tensor& t, std::size_t k = 0);  // k: which parameter / saved tensor
  void add(Role role, std::span<const Tensor> ts);
  bool sim() const { return first_ != nullptr && first_->device().is_sim(); }
  std::string op() const;  // "Model::forward layer 3 (linear(16->16))"

  // The op these tensors are for, as the sim ops below take it: they name it (op()) only in
  // their errors.
  const Layer& layer() const { return layer_; }
  int index() const { return index_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }

 private:
  std::string label(Role role, std::size_t k) const;

  const char* op_;
  int index_;
  const Layer& layer_;
  const std::vector<ParamSpec>& specs_;
  const Tensor* first_ = nullptr;
  Role first_role_ = Role::input;
  std::size_t first_k_ = 0;
};

// A layer's forward on sim tensors (the layer and index of `op`): an output of the layer's
// output shape and dtype, the input (a shape, no data) saved for backward when ctx.keep_saved,
// and forward_ms[index] charged to ctx.sim_clock. Checks shapes as the CPU kernels do.
ForwardResult sim_forward(const OpDevices& op, const Context& ctx, ParamView params,
                          const Tensor& x);

// A merge layer's forward (arity > 1) on sim tensors: its output shape, the inputs (shapes)
// saved when ctx.keep_saved, forward_ms[index] charged.
ForwardResult sim_forward_n(const OpDevices& op, const Context& ctx, std::span<const Tensor> xs);
// Its backward: a gradient of each wanted input's shape, backward_input_ms[index] charged.
std::vector<Tensor> sim_backward_input_n(const OpDevices& op, const Context& ctx,
                                         const Saved& saved, const Tensor& dy,
                                         const std::vector<bool>& want);

// A layer's fused backward on sim tensors: dx of the input's shape (f32; none for token ids)
// when need_dx, charging backward_input_ms[index] then, and backward_weight_ms[index] always.
// The gradient sink is checked but never written.
Tensor sim_backward(const OpDevices& op, const Context& ctx, ParamView params, const Saved& saved,
                    const Tensor& dy, bool need_dx, const GradSink& sink);

// B of a split backward on sim tensors: dx as sim_backward, charging backward_input_ms[index]
// when it is made; then appends dy to saved, so that saved = {input, dy} for W.
Tensor sim_backward_input(const OpDevices& op, const Context& ctx, ParamView params, Saved& saved,
                          const Tensor& dy, bool need_dx);

// W of a split backward on sim tensors, on the state sim_backward_input left: checks it and the
// sink and charges backward_weight_ms[index] (for every layer, as the fused sim_backward).
void sim_backward_weight(const OpDevices& op, const Context& ctx, const Saved& saved,
                         const GradSink& sink);

}  // namespace tandem::models::detail
