#include <set>
#include <stdexcept>
#include <string>

#include "models/model.hpp"
#include "models/param_set.hpp"
#include "models/safetensors.hpp"
#include "tandem/tandem.hpp"
#include "train/model_file.hpp"
#include "train/tied_weights.hpp"

namespace tandem {
namespace {

Weights to_weights(const train::ModelFileInfo& info, const models::ParamSet& params) {
  Weights out;
  out.model = info.model;
  out.step = info.step;
  for (std::int64_t i = 0; i < params.size(); ++i)
    out.tensors.push_back({params.name(i), params[i]});
  return out;
}

// The tensors as the file will hold them (on the CPU), checked: names present and unique.
models::ParamSet file_tensors(const std::string& path, const Weights& weights) {
  models::ParamSet params;
  std::set<std::string> seen;
  for (const NamedTensor& t : weights.tensors) {
    if (t.name.empty() || !t.value.defined()) {
      throw std::invalid_argument("save_weights: " + path + ": a tensor without a name or value");
    }
    if (!seen.insert(t.name).second) {
      throw std::invalid_argument("save_weights: " + path + ": tensor '" + t.name +
                                  "' appears twice");
    }
    params.add(t.name, t.value.device().is_cpu() ? t.value : t.value.to(Device::cpu()));
  }
  if (weights.step < 0) throw std::invalid_argument("save_weights: " + path + ": negative step");
  return params;
}

void write(const std::string& path, const Weights& weights, const models::ParamSet& params) {
  try {
    train::write_model_file(path, params,
                            train::ModelFileInfo{weights.model, weights.step, "", {}});
  } catch (const models::SafetensorsError& e) {
    throw std::invalid_argument(std::string("save_weights: ") + e.what());
  }
}

train::ModelFileContents read(const std::string& path) {
  try {
    return train::read_model_file(path);
  } catch (const train::ModelFileError& e) {
    throw std::invalid_argument(std::string("load_weights: ") + e.what());
  }
}

}  // namespace

Weights load_weights(const std::string& path) {
  const train::ModelFileContents contents = read(path);
  return to_weights(contents.info, contents.params);
}

Weights load_weights(const std::string& path, const Model& model) {
  const train::ModelFileContents contents = read(path);
  try {
    return to_weights(contents.info, train::model_file_params(path, contents.params, *model.impl_));
  } catch (const train::ModelFileError& e) {
    throw std::invalid_argument(std::string("load_weights: ") + e.what());
  }
}

void save_weights(const std::string& path, const Weights& weights) {
  write(path, weights, file_tensors(path, weights));
}

void save_weights(const std::string& path, const Weights& weights, const Model& model) {
  const models::ParamSet params = file_tensors(path, weights);
  // The checks a reader makes (every parameter, shapes, tied copies equal), before anything is
  // written.
  try {
    (void)train::model_file_params(path, params, *model.impl_);
  } catch (const train::ModelFileError& e) {
    throw std::invalid_argument(std::string("save_weights: ") + e.what());
  }
  write(path, weights, train::without_tied_copies(params, *model.impl_));
}

}  // namespace tandem
