#include "train/evaluation.hpp"

#include <algorithm>
#include <vector>

#include "models/train_step.hpp"

namespace tandem::train {
namespace {

namespace data = models::data;

// The batch in the model's layout (an MLP takes images flattened) on the run's device.
Tensor prepare(const Tensor& t, const Shape& shape, Device device) {
  Tensor out = t.shape() == shape ? t : t.reshape(shape);
  return device == out.device() ? out : out.to(device);
}

}  // namespace

EvalResult evaluate_params(const models::Model& model, const models::ParamSet& params,
                           const data::Dataset& eval, int64_t samples, int64_t minibatch,
                           Device device) {
  EvalResult r;
  const int64_t n = std::min(samples, eval.size());
  double loss_sum = 0;
  int64_t correct = 0;
  std::vector<int64_t> idx;
  for (int64_t first = 0; first < n; first += minibatch) {
    const int64_t b = std::min(minibatch, n - first);
    idx.resize(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) idx[static_cast<size_t>(i)] = first + i;
    const data::Batch batch = eval.get(idx);
    const models::EvalOutput out =
        models::evaluate(model, params, prepare(batch.inputs, model.input_shape(b), device),
                         prepare(batch.targets, model.target_shape(b), device));
    loss_sum += static_cast<double>(out.loss) * static_cast<double>(out.count);
    correct += out.correct;
    r.predictions += out.count;
  }
  r.samples = n;
  r.has_accuracy = model.loss().classifies() && eval.task() == models::data::Task::classification;
  if (r.predictions > 0) {
    r.loss = loss_sum / static_cast<double>(r.predictions);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.predictions);
  }
  return r;
}

}  // namespace tandem::train
