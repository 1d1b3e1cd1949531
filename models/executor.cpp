#include "models/executor.hpp"

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/kernels/cpu/bf16_convert.hpp"
#include "models/kernels/cpu/bf16_gemm.hpp"
#include "models/kernels/kernels.hpp"
#include "models/sim_clock.hpp"
#include "runtime/plugin.hpp"
#include "runtime/stream.hpp"

namespace tandem::models {
namespace {

std::atomic<CudaExecutorFactory> cuda_executor_factory{nullptr};

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
  if (device.is_cuda()) {
    if (device.index() >= cuda_device_count()) {
      throw std::invalid_argument(
          "make_executor: " + device.str() + " is not present (" +
          std::to_string(cuda_device_count()) + " CUDA devices" +
          (cuda_backend_built() ? std::string(")") : "; " + plugin_problem("cuda") + ")"));
    }
    const CudaExecutorFactory factory = cuda_executor_factory.load(std::memory_order_acquire);
    if (factory == nullptr) {
      throw std::logic_error("make_executor: the CUDA plugin registered a device but no executor");
    }
    return factory(device, precision);
  }
  throw std::invalid_argument("make_executor: no kernels for device " + device.str());
}

void register_cuda_executor_factory(CudaExecutorFactory factory) {
  cuda_executor_factory.store(factory, std::memory_order_release);
}

}  // namespace tandem::models
