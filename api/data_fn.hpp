#pragma once
// The application's DataFn as the pipeline's data: each batch checked against the model (a
// wrong shape is named with its minibatch here rather than deep inside a stage's kernel), and
// a held-out set of whole minibatches as a dataset the evaluation reads.
#include <cstdint>
#include <memory>

#include "models/data/dataset.hpp"
#include "models/model.hpp"
#include "tandem/tandem.hpp"
#include "train/job_inputs.hpp"

namespace tandem::api {

// Minibatch b of `fn`, checked: defined CPU tensors of the model's input shape and dtype and i32
// targets of its target shape. Throws std::invalid_argument naming "DataFn(b)" (or `name`).
Batch checked_batch(const DataFn& fn, std::int64_t b, const models::Model& model,
                    std::int64_t minibatch, const char* name = "DataFn");

// `batch`, minibatch b of the callback `name`, checked as checked_batch checks it.
Batch checked(Batch batch, std::int64_t b, const models::Model& model, std::int64_t minibatch,
              const char* name);

// Step b's data: minibatches b * accumulate .. b * accumulate + accumulate - 1 of `fn`, each
// checked, stacked in that order. `fn` gets the token of `stop`'s fetch in progress (none when
// null); an empty Batch once it is stopped declines the step (an empty MinibatchData).
train::DataSource data_source(StoppableDataFn fn, std::shared_ptr<train::FetchStop> stop,
                              const models::Model& model, std::int64_t minibatch,
                              std::int64_t accumulate = 1);

// `minibatches` minibatches of `fn` as a dataset of minibatch * minibatches samples, read in
// whole minibatches (what train::evaluate_params asks for when its chunk is the minibatch).
std::shared_ptr<const models::data::Dataset> held_out_dataset(DataFn fn, const models::Model& model,
                                                              std::int64_t minibatch,
                                                              std::int64_t minibatches);

}  // namespace tandem::api
