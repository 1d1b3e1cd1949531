#pragma once
// A job's training and held-out data, loaded from its data section and checked against its
// model before a Session trains on them.
#include <memory>

#include "models/data/dataset.hpp"
#include "models/model.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

// The config's training (and, with train.eval, held-out) data, checked against the model: the
// same per-sample size and dtype, no class beyond its outputs, at least one minibatch. Throws
// JobError naming the data or train.eval section.
struct TrainData {
  std::shared_ptr<const models::data::Dataset> train, eval;
};
TrainData load_train_data(const JobSpec& job, const models::Model& model);

}  // namespace tandem::train
