#include "models/executor.hpp"

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/kernels/cpu/bf16_convert.hpp"
#include "models/kernels/cpu/bf16_gemm.hpp"
#include "models/kernels/kernels.hpp"
#include "models/sim_clock.hpp"
#include "runtime/stream.hpp"

#if TANDEM_HAVE_CUDA
#include <cuda_runtime.h>

#include "models/kernels/cuda/cuda_kernels.hpp"
#endif

namespace tandem::models {
namespace {

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(int threads, MatmulPrecision precision) {
    if (threads > 0) arena_.emplace(threads);
    // bf16 products where the CPU has bf16 instructions (emulated ones would be slower than
    // f32); elsewhere f32, said once per process. tf32 has no CPU counterpart: f32.
    if (precision == MatmulPrecision::bf16 && cpu::bf16_gemm_native_or_warn()) {
      kernels_ = make_cpu_kernels(true);
    }
  }
  Device device() const override { return Device::cpu(); }
  bool uses_memory_after_return() const override { return false; }
  Completion run(Context ctx, const std::function<void(const Context&)>& work) override {
    ctx.sim_clock = nullptr;
    if (kernels_) ctx.kernels = kernels_.get();
    const auto start = std::chrono::steady_clock::now();
    // Kernels split their loops over the arena's threads: with several stages computing at
    // once, each keeps to its share instead of all contending for every core.
    if (arena_) {
      arena_->execute([&] { work(ctx); });
    } else {
      work(ctx);
    }
    return {std::chrono::steady_clock::now() - start, std::chrono::nanoseconds(0)};
  }
  LossResult loss(const Context& ctx, const Loss& loss, const Tensor& output, const Tensor& targets,
                  float grad_scale) const override {
    return loss.compute(ctx, output, targets, true, grad_scale);
  }
  // The conversions split over this stage's own threads, like its kernels.
  Tensor to_wire(const Tensor& t, DType wire) override {
    return in_arena([&] { return Executor::to_wire(t, wire); });
  }
  Tensor from_wire(const Tensor& t) override {
    return in_arena([&] { return Executor::from_wire(t); });
  }
  void step(const Context&, Optimizer& optimizer, ParamSet& params,
            const ParamSet& grads) const override {
    optimizer.step(params, grads);
  }

 private:
  template <class F>
  Tensor in_arena(F&& f) {
    if (!arena_) return f();
    Tensor out;
    arena_->execute([&] { out = f(); });
    return out;
  }

  std::optional<tbb::task_arena> arena_;
  std::unique_ptr<Kernels> kernels_;  // bf16 products; null: cpu_kernels()
};

class SimExecutor final : public Executor {
 public:
  explicit SimExecutor(const SimCosts& costs) : clock_(costs) {}
  Device device() const override { return Device::sim(); }
  bool uses_memory_after_return() const override { return false; }
  Completion run(Context ctx, const std::function<void(const Context&)>& work) override {
    const double before = clock_.elapsed_ms();
    ctx.sim_clock = &clock_;
    work(ctx);
    const std::chrono::nanoseconds busy(std::llround((clock_.elapsed_ms() - before) * 1e6));
    // The emulated stream: this work starts when the previous one is done (or now), so the
    // completions of back-to-back submissions follow the device's own clock, not the times
    // at which their completion messages happened to be handled.
    const auto now = std::chrono::steady_clock::now();
    free_at_ = std::max(free_at_, now) + busy;
    return {busy, std::chrono::duration_cast<std::chrono::nanoseconds>(free_at_ - now)};
  }
  LossResult loss(const Context&, const Loss& loss, const Tensor& logits, const Tensor& targets,
                  float) const override {
    if (logits.device().has_data() || targets.device().has_data()) {
      throw std::invalid_argument("sim executor: loss of " + logits.describe() + " and " +
                                  targets.describe() + " (sim and data tensors cannot be mixed)");
    }
    loss.check_targets(logits.shape(), targets.dtype(), targets.shape(), "targets");
    LossResult r;
    r.count = targets.numel();
    r.dlogits = Tensor::empty(logits.shape(), DType::f32, Device::sim());
    return r;
  }
  void step(const Context& ctx, Optimizer& optimizer, ParamSet& params,
            const ParamSet& grads) const override {
    optimizer.sim_step(params, grads, *ctx.sim_clock);
  }

 private:
  SimClock clock_;
  std::chrono::steady_clock::time_point free_at_{};
};

#if TANDEM_HAVE_CUDA
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
#endif

}  // namespace

Tensor Executor::to_wire(const Tensor& t, DType wire) {
  if (!t.defined() || t.dtype() != DType::f32 || wire == DType::f32) return t;
  if (wire != DType::bf16) {
    throw std::invalid_argument("to_wire: tensors between stages travel in f32 or bf16, not " +
                                std::string(dtype_name(wire)));
  }
  if (t.device().is_sim()) return Tensor::empty(t.shape(), DType::bf16, t.device());
  if (!t.device().is_cpu()) return t;
  Tensor out = Tensor::empty(t.shape(), DType::bf16, Device::cpu());
  cpu::to_bf16(t.data<float>(), out.data<BFloat16>(), t.numel());
  return out;
}

Tensor Executor::from_wire(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::bf16) return t;
  if (t.device().is_sim()) return Tensor::empty(t.shape(), DType::f32, t.device());
  if (!t.device().is_cpu()) return t;
  Tensor out = Tensor::empty(t.shape(), DType::f32, Device::cpu());
  cpu::from_bf16(t.data<BFloat16>(), out.data<float>(), t.numel());
  return out;
}

const char* matmul_precision_name(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::f32:
      return "f32";
    case MatmulPrecision::tf32:
      return "tf32";
    case MatmulPrecision::bf16:
      return "bf16";
  }
  return "?";
}

MatmulPrecision parse_matmul_precision(std::string_view text) {
  for (const MatmulPrecision p :
       {MatmulPrecision::f32, MatmulPrecision::tf32, MatmulPrecision::bf16}) {
    if (text == matmul_precision_name(p)) return p;
  }
  throw std::invalid_argument("matmul precision '" + std::string(text) +
                              "': expected f32, tf32 or bf16");
}

std::unique_ptr<Executor> make_executor(Device device, const SimCosts& sim_costs, int cpu_threads,
                                        MatmulPrecision precision) {
  if (device.is_cpu()) return std::make_unique<CpuExecutor>(cpu_threads, precision);
  if (device.is_sim()) return std::make_unique<SimExecutor>(sim_costs);
#if TANDEM_HAVE_CUDA
  if (device.is_cuda()) {
    if (device.index() >= cuda_device_count()) {
      throw std::invalid_argument("make_executor: " + device.str() + " is not present (" +
                                  std::to_string(cuda_device_count()) + " CUDA devices)");
    }
    return std::make_unique<CudaExecutor>(device, precision);
  }
#endif
  (void)precision;
  throw std::invalid_argument("make_executor: no kernels for device " + device.str() +
                              " in this build (cpu and sim; cuda:N with the CUDA backend)");
}

}  // namespace tandem::models
