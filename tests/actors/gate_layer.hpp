#pragma once
// A layer that passes its input through and, while its gate is closed, holds the forward that
// reaches it until the test opens the gate: a kernel that never returns (or a frozen worker),
// as a watchdog outside the actors sees it. Built into a small mlp at a chosen layer, so that it
// runs on the stage a plan gives that layer.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "models/layer.hpp"
#include "models/layers/linear.hpp"
#include "models/model.hpp"
#include "models/model_spec.hpp"

namespace tandem::actors::testing {

class Gate {
 public:
  // Releases the forward held, and every later one.
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Whether a forward reached the closed gate within `deadline`.
  bool wait_held(std::chrono::seconds deadline) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, deadline, [this] { return held_; });
  }
  // Called by the layer's forward: waits while the gate is closed.
  void pass() {
    std::unique_lock lock(mu_);
    if (!open_) {
      held_ = true;
      cv_.notify_all();
    }
    cv_.wait(lock, [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  bool held_ = false;
};

class GateLayer final : public models::Layer {
 public:
  explicit GateLayer(std::shared_ptr<Gate> gate) : gate_(std::move(gate)) {}
  std::string kind() const override { return "gate"; }
  std::string describe() const override { return "gate"; }
  Shape output_shape(const Shape& input) const override { return input; }
  models::ForwardResult forward(const models::Context&, models::ParamView,
                                const Tensor& x) const override {
    gate_->pass();
    return {x, {}};
  }
  Tensor backward_input(const models::Context&, models::ParamView, models::Saved&,
                        const Tensor& dy) const override {
    return dy;
  }

 private:
  std::shared_ptr<Gate> gate_;
};

// An mlp 6 -> 12 -> 12 -> 12 -> 5 (4 linear layers, inputs and classes as tiny_mlp's) with the
// gate inserted before linear layer `at`: layer `at` of the model is the gate.
inline models::Model gated_mlp(std::shared_ptr<Gate> gate, int at) {
  const std::vector<std::int64_t> widths = {6, 12, 12, 12, 5};
  std::vector<std::shared_ptr<const models::Layer>> layers;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    if (static_cast<int>(i) == at) layers.push_back(std::make_shared<GateLayer>(gate));
    const bool last = i + 2 == widths.size();
    layers.push_back(std::make_shared<models::Linear>(
        widths[i], widths[i + 1],
        last ? models::cpu::Activation::none : models::cpu::Activation::relu));
  }
  return models::Model(models::mlp_spec(widths), std::move(layers));
}

}  // namespace tandem::actors::testing
