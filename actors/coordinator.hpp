#pragma once
// Collects what the stages report during a run: the loss of every slice (from the last stage)
// and the end of every stage replica's schedule.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "actors/handler_gauge.hpp"
#include "actors/pipeline_event.hpp"
#include "runtime/actor.hpp"

namespace tandem::actors {

struct MinibatchLoss {
  double loss_sum = 0;
  std::int64_t rows = 0;
  std::int64_t correct = 0;
};

// Called on the coordinator's thread when the loss of a minibatch is complete.
using MinibatchCallback = std::function<void(std::int64_t minibatch, const MinibatchLoss&)>;

class Coordinator final : public Actor {
 public:
  Coordinator(std::string name, int stage_replicas, MinibatchCallback on_minibatch = {},
              PipelineEventHook on_event = {});

  // Safe from any thread (a run that waits on stages in other processes polls them).
  bool all_finished() const { return finished_.load(std::memory_order_acquire) == expected_; }
  int finished() const { return finished_.load(std::memory_order_acquire); }
  const std::map<std::int64_t, MinibatchLoss>& losses() const { return losses_; }
  // A forward-only run's outputs, by minibatch and first sample of each slice.
  const std::map<std::pair<std::int64_t, std::int64_t>, Tensor>& outputs() const {
    return outputs_;
  }
  // From any thread: its handlers (Pipeline::progress; an on_minibatch that hangs shows here).
  HandlerGauge::Reading gauge() const { return gauge_.read(); }

 protected:
  void on_message(Message& msg) override;

 private:
  MinibatchCallback on_minibatch_;
  PipelineEventHook on_event_;  // coordinator_loss per loss report (traces)
  int expected_;
  std::atomic<int> finished_{0};
  std::vector<bool> seen_;
  std::map<std::int64_t, MinibatchLoss> losses_;
  std::map<std::pair<std::int64_t, std::int64_t>, Tensor> outputs_;
  HandlerGauge gauge_;
};

}  // namespace tandem::actors
