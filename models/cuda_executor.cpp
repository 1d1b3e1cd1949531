// The executor of cuda:N devices, built into the CUDA plugin (runtime/plugin.hpp) and reached
// through models::register_cuda_executor_factory.
#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/executor.hpp"
#include "models/kernels/cuda/cuda_kernels.hpp"
#include "runtime/stream.hpp"

namespace tandem::models {
namespace {

cuda::GemmPrecision gemm_precision(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::tf32:
      return cuda::GemmPrecision::tf32;
    case MatmulPrecision::bf16:
      return cuda::GemmPrecision::bf16;
    case MatmulPrecision::f32:
      break;
  }
  return cuda::GemmPrecision::f32;
}

// Enqueues a stage's work on a stream of its own and returns at once: the actor learns that the
// work is done from Completion::done (ActorSystem::send_when), so no worker ever waits for the
// GPU. Temporaries the layers drop while their kernels are still queued are kept until then
// (CudaKernels::take_allocations).
class CudaExecutor final : public Executor {
 public:
  CudaExecutor(Device device, MatmulPrecision precision)
      : stream_(device), copy_(device), kernels_(stream_, gemm_precision(precision)) {
    enable_peer_access(device.index());
  }
  Device device() const override { return stream_.device(); }

  Completion run(Context ctx, const std::function<void(const Context&)>& work) override {
    ctx.sim_clock = nullptr;
    ctx.kernels = &kernels_;
    const cudaError_t status = cudaSetDevice(stream_.device().index());
    if (status != cudaSuccess) {
      throw std::runtime_error("cuda executor: cudaSetDevice(" +
                               std::to_string(stream_.device().index()) +
                               "): " + cudaGetErrorString(status));
    }
    Completion c;
    c.started = stream_.record_timed();
    try {
      work(ctx);
    } catch (...) {
      // What was enqueued before the failure may still use its temporaries.
      keep_until(stream_.record());
      throw;
    }
    c.done = stream_.record_timed();
    keep_until(c.done);
    return c;
  }

  LossResult loss(const Context& ctx, const Loss& loss, const Tensor& output, const Tensor& targets,
                  float grad_scale) const override {
    Context c = ctx;
    c.kernels = &kernels_;
    LossResult r =
        loss.compute(c, on_device(output, stream_), on_device(targets, stream_), true, grad_scale);
    if (r.device_sums.defined()) {
      // Read by the actor once the work is done (LossResult::resolved): copied to pinned
      // memory on the stream, never waited for here.
      r.pending_sums = Tensor::empty_pinned({4});
      r.pending_sums.copy_from(r.device_sums, stream_);
      r.device_sums = Tensor();
    }
    return r;
  }

  void step(const Context&, Optimizer& optimizer, ParamSet& params,
            const ParamSet& grads) const override {
    optimizer.step(params, grads, kernels_);
  }

  // Work still queued writes `t`: it leaves in f32 (Executor::to_wire).
  Tensor to_wire(const Tensor& t, DType wire) override {
    if (t.device().is_cuda()) return t;
    return Executor::to_wire(t, wire);
  }

  // On the copy stream, so that an input arriving from the host or from another GPU is copied
  // while the compute stream still runs the actions submitted before; the compute stream waits
  // for the copy only where the next work begins.
  Tensor to_device(const Tensor& t) override {
    if (!t.defined() || t.device() == stream_.device()) return t;
    const Tensor d = on_device(t, copy_);
    stream_.wait(copy_.record());
    keep_until(stream_.record());
    return d;
  }

 private:
  // Lets copies from the other GPUs this one can reach go device to device; where it cannot
  // (no peer access), cudaMemcpyAsync stages them through the host itself.
  static void enable_peer_access(int device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) return;
    for (int peer = 0; peer < count; ++peer) {
      int can = 0;
      if (peer == device || cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess || !can) {
        continue;
      }
      if (cudaSetDevice(device) != cudaSuccess) return;
      const cudaError_t status = cudaDeviceEnablePeerAccess(peer, 0);
      // Already enabled by an executor before this one: fine. Either way the error must not
      // linger for the next cudaGetLastError of a kernel launch.
      if (status != cudaSuccess) (void)cudaGetLastError();
    }
  }

  // `t` on this device: itself, or a copy enqueued on `stream` (the compute or the copy stream).
  Tensor on_device(const Tensor& t, Stream& stream) const {
    if (t.device() == stream_.device()) return t;
    Tensor d = kernels_.empty(t.shape(), t.dtype());
    d.copy_from(t, stream);
    return d;
  }

  void keep_until(const Event& e) const {
    std::vector<Tensor> keep = kernels_.take_allocations();
    if (!keep.empty()) e.on_complete([keep = std::move(keep)]() mutable { keep.clear(); });
  }

  mutable Stream stream_;  // copies enqueue on it from const members (loss)
  Stream copy_;            // inputs from elsewhere (to_device)
  CudaKernels kernels_;
};

}  // namespace

std::unique_ptr<Executor> make_cuda_executor(Device device, MatmulPrecision precision) {
  return std::make_unique<CudaExecutor>(device, precision);
}

}  // namespace tandem::models
