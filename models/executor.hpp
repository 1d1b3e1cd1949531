#pragma once
// The device interface a pipeline stage runs its kernels through. A stage never asks which
// device it is on: it hands its work to an Executor and learns when the results are ready.
// On the CPU the work runs inline and is ready at once; on the sim device nothing is computed,
// the work's ops charge their configured durations, and the results are ready that long after
// now (the actor is told by a message, exactly as a CUDA completion will tell it later).
#include <chrono>
#include <functional>
#include <memory>

#include "models/layer.hpp"
#include "models/loss.hpp"
#include "models/optimizer.hpp"
#include "models/param_set.hpp"
#include "models/sim_costs.hpp"
#include "runtime/device.hpp"

namespace tandem::models {

// When the work submitted by one run() is done.
struct Completion {
  std::chrono::nanoseconds busy{0};      // device time the work itself takes
  std::chrono::nanoseconds ready_in{0};  // from now until its results are ready (0: on return)
};

class Executor {
 public:
  virtual ~Executor() = default;

  virtual Device device() const = 0;
  // Runs (or enqueues) `work` with `ctx` completed for this device (e.g. its sim clock). Work
  // is ordered like a stream: it starts once the previously submitted work is done, so the
  // caller may submit more before that and learn each one's completion separately.
  virtual Completion run(Context ctx, const std::function<void(const Context&)>& work) = 0;

  // Softmax cross-entropy of a slice's logits (see softmax_cross_entropy); on a device
  // without data, a gradient of the right shape and no loss. Call inside run().
  virtual LossResult loss(const Context& ctx, const Tensor& logits, const Tensor& targets,
                          float grad_scale) const = 0;
  // One optimizer update (Optimizer::step, or sim_step on the sim device). Call inside run().
  virtual void step(const Context& ctx, Optimizer& optimizer, ParamSet& params,
                    const ParamSet& grads) const = 0;
};

// cpu (and, with the CUDA backend, cuda:N once its kernels exist) or sim with its costs.
// `cpu_threads` > 0 runs a cpu executor's kernels in a oneTBB arena of that many threads (its
// share of the cores when several stages compute at once; 0: the whole machine). Throws
// std::invalid_argument for a device this build cannot run kernels on.
std::unique_ptr<Executor> make_executor(Device device, const SimCosts& sim_costs = {},
                                        int cpu_threads = 0);

}  // namespace tandem::models
