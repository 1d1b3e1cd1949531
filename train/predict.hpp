#pragma once
// Serving what was trained: a model's outputs for given inputs, computed by the same stage
// actors that train it, under the forward-only schedule (schedules::ScheduleKind::forward) on a
// job's plan (stages, replicas, devices). The outputs equal Model::forward's for evaluation
// (Context::training = false) on the same weights run slice by slice, bit for bit on the CPU:
// each slice runs the same kernels over its rows. Against one forward of the whole batch they
// agree to rounding: a BLAS may pick its order of summation by a product's shape.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

#include "models/model.hpp"
#include "models/param_set.hpp"
#include "runtime/tensor.hpp"
#include "schedules/plan.hpp"
#include "train/predict_error.hpp"
#include "train/predict_inputs.hpp"  // tandem predict's files

namespace tandem {
class ThreadBudget;
}

namespace tandem::train {

struct PredictOptions {
  // Slices the inputs are cut into, pipelined across the stages and spread over a stage's
  // replicas; 0: the plan's slice count, raised to its replica count on the busiest stage so
  // that every replica works. Never more than the samples.
  int slices = 0;
  // Worker threads running the stage actors; 0: one per hardware thread.
  std::size_t threads = 0;
  // Threads shared with other sessions (a tandem::Runtime's): the workers take turns on them
  // and the cpu replicas' kernels split them; null: none.
  std::shared_ptr<ThreadBudget> shared_threads;
};

struct PredictResult {
  Tensor outputs;  // [N, ...]: the model's outputs of every input row, in input order
  double seconds = 0;
  int slices = 0;  // what the inputs were cut into
};

// Runs `inputs` (the model's input layout: Model::input_shape(N), Model::input_dtype()) through
// `plan`'s stages and replicas with `weights` (the whole model's, under the model's parameter
// names, on any device). The plan's schedule is replaced by the forward-only one (one chunk per
// stage: the plan's stages' layers). Throws PredictError for inputs or weights that do not fit
// the model, or a stage on the sim device; actors::PipelineError when the run fails.
PredictResult predict(const models::Model& model, const schedules::Plan& plan,
                      const models::ParamSet& weights, const Tensor& inputs,
                      const PredictOptions& options = {});

// Checks `weights` against the model's parameters: every one present, with its shape and
// dtype, and nothing else. Throws PredictError naming the tensor; `source` (a file, or empty)
// prefixes the message.
void check_weights(const models::Model& model, const models::ParamSet& weights,
                   const std::string& source = {});

// The weights to predict with from `path`: a checkpoint directory (the newest checkpoint its
// `latest` names, or a step directory; finished or not: its newest weights) or a whole-model
// safetensors file (train/model_file.hpp). `model_name` is what checkpoints record as the model
// (ModelSpec::describe() for a config's). Throws PredictError naming the path and the problem,
// after the checkpoint's or the file's own checks (CheckpointError, ModelFileError).
models::ParamSet load_predict_weights(const std::filesystem::path& path, const models::Model& model,
                                      const std::string& model_name);

}  // namespace tandem::train
