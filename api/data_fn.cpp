#include "api/data_fn.hpp"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/concat_rows.hpp"

namespace tandem::api {
namespace {

class HeldOut : public models::data::Dataset {
 public:
  HeldOut(DataFn fn, const models::Model& model, std::int64_t minibatch, std::int64_t minibatches)
      : fn_(std::move(fn)), model_(model), minibatch_(minibatch), minibatches_(minibatches) {}

  std::int64_t size() const override { return minibatch_ * minibatches_; }
  models::data::Batch get(std::span<const std::int64_t> indices) const override {
    check_indices(indices);
    const auto n = static_cast<std::int64_t>(indices.size());
    const std::int64_t k = indices.empty() ? 0 : indices.front() / minibatch_;
    bool whole = n == minibatch_ && indices.front() == k * minibatch_;
    for (std::int64_t i = 0; whole && i < n; ++i)
      whole = indices[static_cast<size_t>(i)] == k * minibatch_ + i;
    if (!whole) {
      throw std::invalid_argument("eval_data: the held-out set is read in whole minibatches");
    }
    Batch b = checked_batch(fn_, k, model_, minibatch_, "eval_data");
    return {std::move(b.inputs), std::move(b.targets)};
  }
  std::string describe() const override {
    return "the application's eval_data (" + std::to_string(minibatches_) + " minibatches)";
  }
  models::data::Task task() const override { return models::data::Task::classification; }
  Shape input_shape() const override {
    Shape s = model_.input_shape(1);
    s.erase(s.begin());
    return s;
  }
  DType input_dtype() const override { return model_.input_dtype(); }
  std::int64_t classes() const override { return 0; }

 private:
  DataFn fn_;
  models::Model model_;
  std::int64_t minibatch_, minibatches_;
};

}  // namespace

Batch checked_batch(const DataFn& fn, std::int64_t b, const models::Model& model,
                    std::int64_t minibatch, const char* name) {
  return checked(fn(b), b, model, minibatch, name);
}

Batch checked(Batch batch, std::int64_t b, const models::Model& model, std::int64_t minibatch,
              const char* name) {
  const std::string where = std::string(name) + "(" + std::to_string(b) + ")";
  if (!batch.inputs.defined() || !batch.targets.defined()) {
    throw std::invalid_argument(where + ": inputs or targets undefined");
  }
  if (!batch.inputs.device().is_cpu() || !batch.targets.device().is_cpu()) {
    throw std::invalid_argument(where + ": inputs " + batch.inputs.describe() + ", targets " +
                                batch.targets.describe() + ": give CPU tensors");
  }
  const Shape in_shape = model.input_shape(minibatch);
  if (batch.inputs.shape() != in_shape || batch.inputs.dtype() != model.input_dtype()) {
    throw std::invalid_argument(where + ": inputs " + batch.inputs.describe() +
                                ", the model takes " +
                                std::string(dtype_name(model.input_dtype())) + shape_str(in_shape));
  }
  const Shape target_shape = model.target_shape(minibatch);
  if (batch.targets.numel() != shape_numel(target_shape) ||
      batch.targets.dtype() != model.target_dtype()) {
    throw std::invalid_argument(
        where + ": targets " + batch.targets.describe() + ", the loss " + model.loss().name() +
        " takes " + std::string(dtype_name(model.target_dtype())) + shape_str(target_shape));
  }
  batch.targets = batch.targets.reshape(target_shape);
  return batch;
}

train::DataSource data_source(StoppableDataFn fn, std::shared_ptr<train::FetchStop> stop,
                              const models::Model& model, std::int64_t minibatch,
                              std::int64_t accumulate) {
  return [fn = std::move(fn), stop = std::move(stop), model, minibatch,
          accumulate](std::int64_t b) -> train::MinibatchData {
    const std::stop_token token = stop ? stop->token() : std::stop_token();
    std::vector<Tensor> inputs, targets;
    for (std::int64_t i = 0; i < accumulate; ++i) {
      const std::int64_t k = b * accumulate + i;
      Batch batch = fn(k, token);
      // Declined: the run stops before this minibatch (actors/fetch_stop.hpp).
      if (token.stop_requested() && !batch.inputs.defined() && !batch.targets.defined()) return {};
      batch = checked(std::move(batch), k, model, minibatch, "DataFn");
      inputs.push_back(std::move(batch.inputs));
      targets.push_back(std::move(batch.targets));
    }
    if (accumulate == 1) {
      return train::MinibatchData::whole(std::move(inputs.front()), std::move(targets.front()));
    }
    const models::Kernels& k = models::cpu_kernels();
    return train::MinibatchData::whole(models::concat_rows(k, inputs),
                                       models::concat_rows(k, targets));
  };
}

std::shared_ptr<const models::data::Dataset> held_out_dataset(DataFn fn, const models::Model& model,
                                                              std::int64_t minibatch,
                                                              std::int64_t minibatches) {
  return std::make_shared<HeldOut>(std::move(fn), model, minibatch, minibatches);
}

}  // namespace tandem::api
