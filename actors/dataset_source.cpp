#include "actors/dataset_source.hpp"

#include <mutex>

#include "models/data/minibatch_sampler.hpp"

namespace tandem::actors {

DataSource dataset_source(std::shared_ptr<const models::data::Dataset> dataset,
                          const models::Model& model, std::int64_t minibatch, std::uint64_t seed,
                          Device device) {
  const Shape in_shape = model.input_shape(minibatch);
  const Shape target_shape = model.target_shape(minibatch);
  const DType in_dtype = model.input_dtype();
  if (!device.has_data()) {
    return [=](std::int64_t) {
      return MinibatchData::whole(Tensor::empty(in_shape, in_dtype, device),
                                  Tensor::empty(target_shape, model.target_dtype(), device));
    };
  }
  // The sampler caches an epoch's permutation and is not thread-safe; the loader is one actor,
  // the lock only guards against a caller sharing the source.
  auto sampler = std::make_shared<models::data::MinibatchSampler>(dataset->size(), minibatch, seed);
  auto mu = std::make_shared<std::mutex>();
  return [=](std::int64_t b) {
    std::vector<std::int64_t> idx;
    {
      std::lock_guard lock(*mu);
      idx = sampler->indices(b);
    }
    const models::data::Batch batch = dataset->get(idx);
    Tensor in = batch.inputs.shape() == in_shape ? batch.inputs : batch.inputs.reshape(in_shape);
    // A dataset whose targets the loss cannot read fails here, naming both, rather than as a
    // kernel's complaint on the last stage.
    if (batch.targets.dtype() != model.target_dtype() ||
        batch.targets.numel() != shape_numel(target_shape)) {
      model.loss().check_targets(model.activation_shapes(minibatch).back(), batch.targets.dtype(),
                                 batch.targets.shape(), "the targets of " + dataset->describe());
    }
    Tensor tg =
        batch.targets.shape() == target_shape ? batch.targets : batch.targets.reshape(target_shape);
    return MinibatchData::whole(in.to(device), tg.to(device));
  };
}

}  // namespace tandem::actors
