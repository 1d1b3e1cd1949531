#include "train/model_file.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "models/safetensors.hpp"
#include "train/job_error.hpp"
#include "train/model_identity.hpp"
#include "train/tied_weights.hpp"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void refuse(const fs::path& path, const std::string& what) {
  throw ModelFileError(path.string() + ": " + what);
}

std::string metadata_value(const models::SafetensorsMetadata& metadata, const std::string& key) {
  const auto it = metadata.find(key);
  return it == metadata.end() ? std::string() : it->second;
}

// The file says what it is and which model it holds before its tensors are compared: another
// model's file would otherwise be reported as its first differing tensor.
void check_format(const fs::path& path, const models::SafetensorsMetadata& metadata) {
  const std::string format = metadata_value(metadata, "format");
  if (format != kModelFileFormat) {
    std::string what = "not a Tandem model file (__metadata__ format is '" + format +
                       "', expected '" + kModelFileFormat + "')";
    if (format == "tandem-checkpoint-stage") {
      what +=
          ": it is one stage of a checkpoint; `tandem checkpoint export DIR -o FILE` writes "
          "the whole model";
    }
    refuse(path, what);
  }
  const std::string version = metadata_value(metadata, "format_version");
  if (version != kModelFileFormatVersion) {
    refuse(path,
           "format_version '" + version + "', this Tandem reads '" + kModelFileFormatVersion + "'");
  }
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t end = text.find('\n', at);
    out.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) return out;
    at = end + 1;
  }
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    out += lines[i];
  }
  return out;
}

void check_metadata(const fs::path& path, const models::SafetensorsMetadata& metadata,
                    const models::Model& model, const std::string& model_name) {
  check_format(path, metadata);
  const std::string name = metadata_value(metadata, "model");
  if (name != model_name) {
    refuse(path, "holds the weights of model '" + name + "', but this run's model is '" +
                     model_name + "'");
  }
  const std::vector<std::string> recorded = split_lines(metadata_value(metadata, "model_layers"));
  if (recorded.empty()) return;  // written without them (save_weights, older files)
  if (const auto diff = identity_difference(recorded, model_identity(model))) {
    refuse(path, "holds the weights of another model '" + name + "': " + *diff);
  }
}

// Every tensor is a parameter of the model with its shape and dtype, and every parameter is
// there but the follower copies of tied ones (`optional`).
void check_tensors(const fs::path& path, const models::ParamSet& tensors,
                   const models::ParamSet& expected, const std::set<std::string>& optional) {
  for (std::int64_t i = 0; i < tensors.size(); ++i) {
    const std::string& name = tensors.name(i);
    if (!expected.contains(name)) {
      refuse(path, "tensor '" + name + "' is no parameter of the model");
    }
    const Tensor& want = expected.at(name);
    const Tensor& got = tensors[i];
    if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
      refuse(path, "tensor '" + name + "': " + std::string(dtype_name(got.dtype())) +
                       shape_str(got.shape()) + ", but the model's parameter is " +
                       std::string(dtype_name(want.dtype())) + shape_str(want.shape()));
    }
  }
  for (const std::string& name : expected.names()) {
    if (!tensors.contains(name) && optional.count(name) == 0) {
      refuse(path, "tensor '" + name + "' is missing");
    }
  }
}

// The layer a global parameter name ("12.weight") belongs to; names without one sort last.
std::int64_t layer_of(std::string_view name) {
  std::int64_t layer = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || end == name.data() + name.size() || *end != '.') {
    return std::numeric_limits<std::int64_t>::max();
  }
  return layer;
}

// An interleaved stage holds several chunks of layers, so stage order is not layer order.
models::ParamSet in_layer_order(const models::ParamSet& params) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(params.size()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return layer_of(params.name(a)) < layer_of(params.name(b));
  });
  models::ParamSet out;
  for (std::int64_t i : order) out.add(params.name(i), params[i]);
  return out;
}

}  // namespace

void write_model_file(const fs::path& path, const models::ParamSet& params,
                      const ModelFileInfo& info) {
  models::SafetensorsMetadata metadata = {
      {"format", kModelFileFormat},    {"format_version", kModelFileFormatVersion},
      {"model", info.model},           {"step", std::to_string(info.step)},
      {"checkpoint", info.checkpoint},
  };
  if (!info.model_layers.empty()) metadata["model_layers"] = join_lines(info.model_layers);
  models::write_safetensors(path, params, metadata);
}

models::ParamSet read_model_file(const fs::path& path, const models::Model& model,
                                 const std::string& model_name, schedules::LayerRange layers) {
  if (layers.begin < 0 || layers.begin >= layers.end || layers.end > model.num_layers()) {
    throw std::invalid_argument("read_model_file: layers [" + std::to_string(layers.begin) + ", " +
                                std::to_string(layers.end) + ") of a model of " +
                                std::to_string(model.num_layers()) + " layers");
  }
  models::SafetensorsContent content;
  try {
    content = models::read_safetensors(path);
  } catch (const models::SafetensorsError& e) {
    throw ModelFileError(e.what());  // names the path already
  }
  check_metadata(path, content.metadata, model, model_name);
  const models::ParamSet whole = model_file_params(path, content.tensors, model);
  models::ParamSet out;
  const models::ParamSet wanted = model.init_params(0, layers.begin, layers.end, Device::sim());
  for (const std::string& name : wanted.names()) out.add(name, whole.at(name));
  return out;
}

models::ParamSet read_model_file(const fs::path& path, const models::Model& model,
                                 const std::string& model_name) {
  return read_model_file(path, model, model_name, {0, model.num_layers()});
}

models::ParamSet model_file_params(const fs::path& path, const models::ParamSet& tensors,
                                   const models::Model& model) {
  const std::vector<std::string> followers = models::follower_names(model.ties());
  check_tensors(path, tensors, model.init_params(0, Device::sim()),
                {followers.begin(), followers.end()});
  if (const std::optional<std::string> why = differing_tied_copy(tensors, model)) {
    refuse(path, *why);
  }
  if (const std::optional<std::string> bad = models::non_finite_entry(tensors)) {
    refuse(path, *bad + ": the weights to start from are finite");
  }
  return with_tied_copies(tensors, model);
}

ModelFileContents read_model_file(const fs::path& path) {
  models::SafetensorsContent content;
  try {
    content = models::read_safetensors(path);
  } catch (const models::SafetensorsError& e) {
    throw ModelFileError(e.what());
  }
  check_format(path, content.metadata);
  ModelFileContents out;
  out.info.model = metadata_value(content.metadata, "model");
  out.info.checkpoint = metadata_value(content.metadata, "checkpoint");
  out.info.model_layers = split_lines(metadata_value(content.metadata, "model_layers"));
  const std::string step = metadata_value(content.metadata, "step");
  try {
    std::size_t used = 0;
    out.info.step = std::stoll(step, &used);
    if (used != step.size() || out.info.step < 0) throw std::invalid_argument(step);
  } catch (const std::exception&) {
    refuse(path, "__metadata__ step '" + step + "' is not a step count");
  }
  out.params = in_layer_order(content.tensors);
  return out;
}

models::ParamSet newest_weights(const Checkpoint& checkpoint) {
  models::ParamSet stages;
  for (const StageCheckpoint& stage : checkpoint.stages) {
    const CheckpointWeights* newest = nullptr;
    for (const CheckpointWeights& w : stage.weights) {
      if (w.replica == 0 && (newest == nullptr || w.version > newest->version)) newest = &w;
    }
    if (newest == nullptr) {
      throw CheckpointError(stage.file.string() + ": the stage holds no weights of replica 0");
    }
    stages.merge(newest->params);
  }
  return in_layer_order(stages);
}

models::ParamSet initial_weights(const fs::path& path, const models::Model& model,
                                 const std::string& model_name, schedules::LayerRange layers) {
  try {
    return read_model_file(path, model, model_name, layers);
  } catch (const ModelFileError& e) {
    throw JobError("train.init_from", e.what());
  }
}

}  // namespace tandem::train
