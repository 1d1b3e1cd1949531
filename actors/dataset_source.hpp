#pragma once
// A DataSource over a dataset: minibatch b is the sampler's minibatch b (the same samples the
// single-device trainer takes at step b), in the model's input layout, on the given device (on
// sim: tensors of the right shapes and no data).
#include <memory>

#include "actors/minibatch_data.hpp"
#include "models/data/dataset.hpp"
#include "models/model.hpp"

namespace tandem::actors {

DataSource dataset_source(std::shared_ptr<const models::data::Dataset> dataset,
                          const models::Model& model, std::int64_t minibatch, std::uint64_t seed,
                          Device device = Device::cpu());

}  // namespace tandem::actors
