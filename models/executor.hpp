#pragma once
// The device interface a pipeline stage runs its kernels through. A stage never asks which
// device it is on: it hands its work to an Executor and learns when the results are ready.
// On the CPU the work runs inline and is ready at once; on the sim device nothing is computed,
// the work's ops charge their configured durations, and the results are ready that long after
// now (the actor is told by a message, exactly as a CUDA completion tells it).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "models/layer.hpp"
#include "models/loss.hpp"
#include "models/optimizer.hpp"
#include "models/param_set.hpp"
#include "models/sim_costs.hpp"
#include "runtime/device.hpp"
#include "runtime/event.hpp"

namespace tandem::models {

// When the work submitted by one run() is done.
struct Completion {
  std::chrono::nanoseconds busy{0};      // device time the work itself takes
  std::chrono::nanoseconds ready_in{0};  // from now until its results are ready (0: on return)
  // Asynchronous devices (cuda): completes once the work's results are ready, and carries its
  // failure (Event::error()); busy and ready_in are then 0. Never recorded for cpu and sim.
  Event done;
  // With `done`: a timed event recorded before the work, `done` timed too, so that
  // done.elapsed_since(started) is the device time the work took and completed_at() places it
  // (busy time and traces of asynchronous stages). Unrecorded where the device keeps no times.
  Event started;
};

class Executor {
 public:
  virtual ~Executor() = default;

  virtual Device device() const = 0;
  // Runs (or enqueues) `work` with `ctx` completed for this device (e.g. its sim clock). Work
  // is ordered like a stream: it starts once the previously submitted work is done, so the
  // caller may submit more before that and learn each one's completion separately.
  virtual Completion run(Context ctx, const std::function<void(const Context&)>& work) = 0;
  // Whether work that run() returned from may still read or write its tensors (cuda: until
  // Completion::done), so the caller must keep them alive until then. True unless the executor
  // says otherwise: cpu (the work is over on return) and sim (it touches no memory).
  virtual bool uses_memory_after_return() const { return true; }

  // `t` where this executor computes: itself when it is there already (always for cpu and sim),
  // else a copy ordered before the work run() submits next (cuda: enqueued on its stream, the
  // source kept alive until it has run). For what arrives from elsewhere: a loader's batch, a
  // gradient from another host.
  virtual Tensor to_device(const Tensor& t) { return t; }

  // Tensors between stages travel in the pipeline's wire dtype (PipelineSpec::wire_dtype).
  // to_wire: `t`, an f32 activation or gradient that work this executor ran has written, in
  // `wire`. bf16 rounds to nearest even; cpu converts at once, sim makes a bf16 tensor of t's
  // shape (no data: the bytes a send counts are the wire's). cuda returns `t` in f32: its
  // tensors are written by work still queued, and a conversion ordered behind that work is not
  // part of this interface, so cuda stages send f32 whatever the wire.
  virtual Tensor to_wire(const Tensor& t, DType wire);
  // What arrived from another stage, in f32 before to_device: a host bf16 tensor widened (exact),
  // a sim one remade in f32, anything else itself.
  virtual Tensor from_wire(const Tensor& t);

  // `loss` of a slice's output with its gradient (Loss::compute); on a device without data, a
  // gradient of the right shape and no loss. Call inside run().
  virtual LossResult loss(const Context& ctx, const Loss& loss, const Tensor& output,
                          const Tensor& targets, float grad_scale) const = 0;
  // One optimizer update (Optimizer::step, or sim_step on the sim device). Call inside run().
  virtual void step(const Context& ctx, Optimizer& optimizer, ParamSet& params,
                    const ParamSet& grads) const = 0;
};

// How matrix products run: f32, or inputs rounded to TF32 or to bf16 with f32 accumulation. cuda
// executors round in every GEMM (models/kernels/cuda/gemm.hpp); cpu executors at bf16 round the
// Linear layers' and transformer blocks' products (models/kernels/cpu/bf16_gemm.hpp, weights
// rounded once per version) where the CPU has AVX512-BF16 or AMX, and compute in f32 elsewhere
// (one log line) and at tf32.
enum class MatmulPrecision : std::uint8_t { f32, tf32, bf16 };
// "f32", "tf32", "bf16"; parse throws std::invalid_argument naming `text`.
const char* matmul_precision_name(MatmulPrecision precision);
MatmulPrecision parse_matmul_precision(std::string_view text);

// cpu, cuda:N (with the CUDA backend: kernels enqueued on a stream of its own, completion by
// Completion::done) or sim with its costs. `cpu_threads` > 0 runs a cpu executor's kernels in a
// oneTBB arena of that many threads (its share of the cores when several stages compute at
// once; 0: the whole machine). Throws std::invalid_argument for a device this build cannot run
// kernels on.
std::unique_ptr<Executor> make_executor(Device device, const SimCosts& sim_costs = {},
                                        int cpu_threads = 0,
                                        MatmulPrecision precision = MatmulPrecision::f32);

// cuda:N executors come from the CUDA plugin (runtime/plugin.hpp), which registers its factory
// when it loads; make_executor loads it at the first cuda device.
using CudaExecutorFactory = std::unique_ptr<Executor> (*)(Device device, MatmulPrecision precision);
void register_cuda_executor_factory(CudaExecutorFactory factory);
// Defined in the CUDA plugin only (cuda_executor.cpp).
std::unique_ptr<Executor> make_cuda_executor(Device device, MatmulPrecision precision);

}  // namespace tandem::models
