#include <set>
#include <stdexcept>
#include <string>

#include "models/param_set.hpp"
#include "models/safetensors.hpp"
#include "tandem/tandem.hpp"
#include "train/model_file.hpp"

namespace tandem {

Weights load_weights(const std::string& path) {
  train::ModelFileContents contents;
  try {
    contents = train::read_model_file(path);
  } catch (const train::ModelFileError& e) {
    throw std::invalid_argument(std::string("load_weights: ") + e.what());
  }
  Weights out;
  out.model = contents.info.model;
  out.step = contents.info.step;
  for (std::int64_t i = 0; i < contents.params.size(); ++i) {
    out.tensors.push_back({contents.params.name(i), contents.params[i]});
  }
  return out;
}

void save_weights(const std::string& path, const Weights& weights) {
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
  try {
    train::write_model_file(path, params, train::ModelFileInfo{weights.model, weights.step, ""});
  } catch (const models::SafetensorsError& e) {
    throw std::invalid_argument(std::string("save_weights: ") + e.what());
  }
}

}  // namespace tandem
