#pragma once
// Whether a job fits this machine's memory, before anything is allocated: a step of its own,
// which the config reader takes after reading a job and the embedding API after building one.
// The estimate is a lower bound: the weights, gradients and optimizer state of every replica on
// a device with data (a stage's share of the parameters by its share of the layers), one
// minibatch's activations, and the data held in memory.
#include "models/model.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

// The bytes the job's data holds in memory: all of it, and the training part of that.
struct DataBytes {
  double all = 0;
  double training = 0;
};

// Throws JobError when the estimate is over `memory_bytes`, at the key whose part is largest:
// "train.minibatch" (activations), "data" or "train.eval.samples" (the data), else "model";
// the message gives each part. `parameters`: the model's parameter count.
void check_job_memory(const JobSpec& job, const models::Model& model, double parameters,
                      const DataBytes& data, double memory_bytes);

}  // namespace tandem::train
