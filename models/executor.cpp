#include "models/executor.hpp"

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "models/sim_clock.hpp"

namespace tandem::models {
namespace {

class CpuExecutor final : public Executor {
 public:
  explicit CpuExecutor(int threads) {
    if (threads > 0) arena_.emplace(threads);
  }
  Device device() const override { return Device::cpu(); }
  Completion run(Context ctx, const std::function<void(const Context&)>& work) override {
    ctx.sim_clock = nullptr;
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
  LossResult loss(const Context&, const Tensor& logits, const Tensor& targets,
                  float grad_scale) const override {
    return softmax_cross_entropy(logits, targets, true, grad_scale);
  }
  void step(const Context&, Optimizer& optimizer, ParamSet& params,
            const ParamSet& grads) const override {
    optimizer.step(params, grads);
  }

 private:
  std::optional<tbb::task_arena> arena_;
};

class SimExecutor final : public Executor {
 public:
  explicit SimExecutor(const SimCosts& costs) : clock_(costs) {}
  Device device() const override { return Device::sim(); }
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
  LossResult loss(const Context&, const Tensor& logits, const Tensor& targets,
                  float) const override {
    if (logits.device().has_data() || targets.device().has_data()) {
      throw std::invalid_argument("sim executor: loss of " + logits.describe() + " and " +
                                  targets.describe() + " (sim and data tensors cannot be mixed)");
    }
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

std::unique_ptr<Executor> make_executor(Device device, const SimCosts& sim_costs, int cpu_threads) {
  if (device.is_cpu()) return std::make_unique<CpuExecutor>(cpu_threads);
  if (device.is_sim()) return std::make_unique<SimExecutor>(sim_costs);
  throw std::invalid_argument("make_executor: no kernels for device " + device.str() +
                              " in this build (cpu and sim run pipelines today)");
}

}  // namespace tandem::models
