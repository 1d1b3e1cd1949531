#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "models/delay_correction.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/param_set.hpp"
#include "models/train_step.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models {

// One stage of a delayed run: layers [begin, end) whose gradient of step t is computed with
// their own weights from step t - delay (version max(0, t - delay): after that many updates).
struct DelayedStage {
  int begin = 0;
  int end = 0;
  int delay = 0;
};

struct DelayedTrainingSpec {
  const Model* model = nullptr;      // not owned; outlives the trainer
  std::vector<DelayedStage> stages;  // the model's layers in order, each in one stage
  OptimizerSpec optimizer;           // one optimizer per stage, made from this
  AsyncCorrection correction = AsyncCorrection::none;  // per stage, with that stage's delay
  std::function<double(std::int64_t step)> lr_at;      // empty: optimizer.lr throughout
};

// Training on one device with each stage's updates delayed, as an asynchronous pipeline
// delays them, without any pipeline: what the delays alone cost, and what a correction wins
// back. At every delay 0 it is plain training (train_step, then every stage's optimizer step),
// bit for bit.
class DelayedTrainer {
 public:
  // Throws std::invalid_argument when the stages do not cover the model's layers in order, a
  // delay is negative, or the optimizer or correction is refused.
  DelayedTrainer(const DelayedTrainingSpec& spec, const ParamSet& initial);
  // Step t (t = steps() before the call): forward and backward at each stage's delayed version,
  // then each stage's update of its newest weights.
  StepOutput step(const Tensor& inputs, const Tensor& targets, std::uint64_t step_seed);
  std::int64_t steps() const { return steps_; }
  // The newest weights of every stage, in the model's order (with a correction: the corrected
  // weights the next forwards use, not the master).
  ParamSet params() const;
  const Optimizer& optimizer(int stage) const;

 private:
  struct Stage {
    std::vector<std::string> names;
    int delay = 0;
    std::unique_ptr<Optimizer> optimizer;
    std::deque<ParamSet> versions;  // oldest first; the newest last
  };
  const Model* model_;
  std::function<double(std::int64_t)> lr_at_;
  double lr_;
  std::vector<Stage> stages_;
  std::int64_t steps_ = 0;
};

}  // namespace tandem::models
