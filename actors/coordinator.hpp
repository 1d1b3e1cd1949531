#pragma once
// Collects what the stages report during a run: the loss of every slice (from the last stage)
// and the end of every stage replica's schedule.
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
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
  // The gradient norm of its update round before clipping (GradNormReport); NaN when the run
  // takes none.
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
};

// Which gradient norms a run's stages report: none; the whole model's, once per round (a flush
// schedule); or each of `stages` stages' own (an asynchronous schedule), added in stage order.
struct NormReports {
  enum class Kind { none, global, per_stage } kind = Kind::none;
  int stages = 0;
};

// Called on the coordinator's thread when the loss of a minibatch is complete.
using MinibatchCallback = std::function<void(std::int64_t minibatch, const MinibatchLoss&)>;

class Coordinator final : public Actor {
 public:
  Coordinator(std::string name, int stage_replicas, MinibatchCallback on_minibatch = {},
              PipelineEventHook on_event = {}, NormReports norms = {});

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
  // The squares reported for one round so far (per stage, or one entry for the global norm).
  struct NormParts {
    std::vector<double> squares;
    std::vector<bool> seen;
    int have = 0;
  };
  void on_loss(const Message& msg);
  void on_norm(const Message& msg);
  // Calls on_minibatch once its loss and, when the run reports norms, its norm are complete.
  void maybe_complete(std::int64_t b);

  MinibatchCallback on_minibatch_;
  NormReports norms_;
  std::map<std::int64_t, NormParts> norm_parts_;
  std::map<std::int64_t, std::uint32_t> rows_total_;  // by minibatch, from its loss reports
  std::set<std::int64_t> norm_done_;                  // rounds whose norm is complete
  PipelineEventHook on_event_;                        // coordinator_loss per loss report (traces)
  int expected_;
  std::atomic<int> finished_{0};
  std::vector<bool> seen_;
  std::map<std::int64_t, MinibatchLoss> losses_;
  std::map<std::pair<std::int64_t, std::int64_t>, Tensor> outputs_;
  HandlerGauge gauge_;
};

}  // namespace tandem::actors
