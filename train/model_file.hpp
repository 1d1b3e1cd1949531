#pragma once
// Whole-model files: one safetensors file (models/safetensors.hpp) holding a model's weights,
// each parameter under its global name "<layer>.<param>" ("0.weight", as models::Model names
// them; a tied parameter once, under its leader's name: train/tied_weights.hpp), with the
// model's description in `__metadata__`. `tandem checkpoint export` writes one from a
// checkpoint's newest weights; `train.init_from` starts a run of the same model from one under
// any plan (docs/checkpoints.md, "Whole-model files").
//
// `__metadata__`: format "tandem-model", format_version "1", model (models::ModelSpec::describe(),
// what a checkpoint's manifest records as the model), step (the updates the weights had), and
// checkpoint (the step directory they came from; empty when not exported from one).
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/model.hpp"
#include "models/param_set.hpp"
#include "schedules/plan.hpp"
#include "train/checkpoint.hpp"

namespace tandem::train {

// Names the file and what is wrong: "model.safetensors: tensor '1.weight': F32[4, 8], but the
// model's parameter is F32[8, 8]".
class ModelFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ModelFileInfo {
  std::string model;  // models::ModelSpec::describe() (Checkpoint::model)
  std::int64_t step = 0;
  std::string checkpoint;  // the step directory's name ("step-00000200"), or empty
  // train::model_identity() (Checkpoint::model_layers), when known: written as the metadata
  // "model_layers", one line each, and compared line by line when a file is read for a model.
  std::vector<std::string> model_layers;
};

// Writes `params` (a whole model's weights under their global names) atomically
// (runtime/atomic_file.hpp). Throws models::SafetensorsError or FileError naming the path.
void write_model_file(const std::filesystem::path& path, const models::ParamSet& params,
                      const ModelFileInfo& info);

// The parameters of layers [layers.begin, layers.end) of `model`, exactly those, in the model's
// order, on the CPU. Every tensor of the file is checked against the whole model first: a
// missing parameter (a tied parameter's follower copies may be: they take the leader's values),
// a tensor that is no parameter of the model, one of another shape or dtype, or a follower that
// differs from its leader; and the metadata's format and model description against `model_name`
// (what checkpoints record as the model: ModelSpec::describe() for a config's). Throws
// ModelFileError naming the file and the tensor or both models.
models::ParamSet read_model_file(const std::filesystem::path& path, const models::Model& model,
                                 const std::string& model_name, schedules::LayerRange layers);
// All of the model's layers.
models::ParamSet read_model_file(const std::filesystem::path& path, const models::Model& model,
                                 const std::string& model_name);

// The whole model's parameters, in its order, from the tensors of the file `path` (read
// without a model): checked as read_model_file checks them, each tied parameter's follower
// copies filled from its leader (train/tied_weights.hpp). A file stores a tied parameter once;
// one holding a follower that differs from its leader is refused, naming the follower.
models::ParamSet model_file_params(const std::filesystem::path& path,
                                   const models::ParamSet& tensors, const models::Model& model);

// Any model's file, for readers that have no model to check it against (the embedding API's
// load_weights): the format and metadata are checked, the tensors come back in layer order.
struct ModelFileContents {
  models::ParamSet params;
  ModelFileInfo info;
};
ModelFileContents read_model_file(const std::filesystem::path& path);

// The whole model's newest weights in a checkpoint: each stage's replica 0 at its newest
// version (replicas agree at a checkpoint), in layer order. Throws
// CheckpointError naming the stage file when a stage holds no weights of replica 0.
models::ParamSet newest_weights(const Checkpoint& checkpoint);

// A run's starting weights of `layers` from `train.init_from`: read_model_file's errors as
// JobError("train.init_from", ...), which a config's reader points at the key's line.
models::ParamSet initial_weights(const std::filesystem::path& path, const models::Model& model,
                                 const std::string& model_name, schedules::LayerRange layers);

inline constexpr const char* kModelFileFormat = "tandem-model";
inline constexpr const char* kModelFileFormatVersion = "1";

}  // namespace tandem::train
