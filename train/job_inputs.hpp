#pragma once
// What a job built in code (the embedding API's Session) brings in place of the parts of a
// JobSpec that name things: its own model (custom layers among its layers), its minibatches and
// held-out data, a learning rate per round, and a callback per minibatch. Whatever is left
// unset comes from the JobSpec, as for a config's job.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/dataset_source.hpp"
#include "actors/fetch_stop.hpp"
#include "actors/minibatch_data.hpp"
#include "actors/pipeline.hpp"
#include "models/data/dataset.hpp"
#include "models/model.hpp"

namespace tandem::train {

// The data a front end hands a job, in the pipeline's own terms: minibatch b's inputs and
// targets (DataSource, MinibatchData), a dataset's minibatches as one (dataset_source), the stop
// tokens of a data callback (FetchStop), and what a minibatch reports when it completes.
using actors::dataset_source;
using actors::DataSource;
using actors::FetchStop;
using actors::MinibatchData;
using actors::MinibatchReport;

struct JobInputs {
  // Instead of models::Model::build(job.model).
  std::optional<models::Model> model;
  // What checkpoints record as the model (a resume must find the same): with `model`, the
  // application's name for it; empty: job.model.describe().
  std::string model_name;
  // Minibatch b's inputs and targets instead of job.data's training set; with it, `eval` is
  // the held-out data train.eval evaluates (none: no evaluation) and `classification` says
  // whether records carry an accuracy.
  actors::DataSource data;
  // The tokens `data` hands the application's callback (actors/fetch_stop.hpp); null: none.
  std::shared_ptr<actors::FetchStop> fetch_stop;
  std::shared_ptr<const models::data::Dataset> eval;
  bool classification = true;
  // The learning rate of update round k instead of train.lr_schedule's.
  std::function<double(int64_t round)> lr_at;
  // Each minibatch's loss as it completes (any order), on a pipeline thread.
  std::function<void(int64_t minibatch, const actors::MinibatchReport&)> on_minibatch;
};

}  // namespace tandem::train
