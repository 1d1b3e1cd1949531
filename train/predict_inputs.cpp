#include "train/predict_inputs.hpp"

#include <cmath>
#include <cstdint>

#include "models/param_set.hpp"
#include "models/safetensors.hpp"

namespace tandem::train {
namespace {

// The one tensor named "input", of the model's dtype and shape, finite.
Tensor check_content(const models::SafetensorsContent& content, const std::string& source,
                     const models::Model& model) {
  for (std::int64_t i = 0; i < content.tensors.size(); ++i) {
    if (content.tensors.name(i) != kPredictInputName) {
      throw PredictError(source + ": tensor '" + content.tensors.name(i) +
                         "': an inputs file holds one tensor, named '" + kPredictInputName + "'");
    }
  }
  if (!content.tensors.contains(kPredictInputName)) {
    throw PredictError(source + ": no tensor '" + kPredictInputName + "'");
  }
  const Tensor& x = content.tensors.at(kPredictInputName);
  if (x.rank() == 0 || x.dim(0) < 1 || x.dtype() != model.input_dtype() ||
      x.shape() != model.input_shape(x.dim(0))) {
    throw PredictError(source + ": tensor '" + kPredictInputName + "' is " + x.describe() +
                       ", but the model reads " + std::string(dtype_name(model.input_dtype())) +
                       shape_str(model.input_shape(x.rank() == 0 ? 1 : x.dim(0))) +
                       " (N >= 1 rows)");
  }
  require_finite_rows(x, source + ": tensor '" + kPredictInputName + "'");
  return x;
}

}  // namespace

Tensor read_predict_inputs(const std::filesystem::path& path, const models::Model& model) {
  models::SafetensorsContent content;
  try {
    content = models::read_safetensors(path);
  } catch (const models::SafetensorsError& e) {
    throw PredictError(e.what());  // names the path
  }
  return check_content(content, path.string(), model);
}

void require_finite_rows(const Tensor& x, const std::string& what) {
  if (x.dtype() != DType::f32 || x.rank() == 0 || x.dim(0) < 1 || !x.device().is_cpu()) return;
  const float* v = x.data<float>();
  const std::int64_t row = x.numel() / x.dim(0);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    if (!std::isfinite(v[i])) {
      throw PredictError(what + " holds " + std::to_string(v[i]) + " in row " +
                         std::to_string(i / row) + " at element " + std::to_string(i % row) +
                         ": inputs must be finite");
    }
  }
}

Tensor read_predict_inputs_bytes(std::span<const std::byte> bytes, const std::string& source,
                                 const models::Model& model) {
  models::SafetensorsContent content;
  try {
    content = models::read_safetensors_bytes(bytes, source);
  } catch (const models::SafetensorsError& e) {
    throw PredictError(e.what());  // names the source
  }
  return check_content(content, source, model);
}

void write_predict_outputs(const std::filesystem::path& path, const Tensor& outputs,
                           const std::string& model_name) {
  models::ParamSet tensors;
  tensors.add(kPredictOutputName, outputs);
  models::write_safetensors(path, tensors,
                            {{"format", "tandem-predictions"}, {"model", model_name}});
}

}  // namespace tandem::train
