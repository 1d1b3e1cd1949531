#pragma once
// Held-out evaluation of a whole model's weights: the loss and accuracy a Session reports at
// the end of a run and, with train.eval.every, in its middle (train/eval_snapshots.hpp).
#include <cstdint>

#include "models/data/dataset.hpp"
#include "models/model.hpp"
#include "models/param_set.hpp"
#include "runtime/device.hpp"

namespace tandem::train {

struct EvalResult {
  double loss = 0;      // mean over predictions
  double accuracy = 0;  // share of correct predictions
  // Whether accuracy means anything: a classification task under a loss that classifies
  // (regression losses do not; language models report none either).
  bool has_accuracy = true;
  int64_t samples = 0;
  int64_t predictions = 0;  // samples, or tokens for language models
};

// The held-out loss and accuracy of `params` on the first `samples` samples of `eval`, in
// chunks of `minibatch`, on `device`.
EvalResult evaluate_params(const models::Model& model, const models::ParamSet& params,
                           const models::data::Dataset& eval, int64_t samples, int64_t minibatch,
                           Device device);

}  // namespace tandem::train
