#pragma once
// `tandem predict`'s files: the inputs it reads (`--input FILE`) and the outputs it writes
// (`-o FILE`), both safetensors.
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

#include "models/model.hpp"
#include "runtime/tensor.hpp"
#include "train/predict_error.hpp"

namespace tandem::train {

inline constexpr const char* kPredictInputName = "input";
inline constexpr const char* kPredictOutputName = "output";

// Inputs: a safetensors file holding exactly one tensor, named "input", in the model's input
// layout (Model::input_dtype(), Model::input_shape(N), N >= 1); f32 inputs finite, as a row
// holding a NaN or an infinity would give outputs that mean nothing. Throws PredictError
// naming the file and the tensor: not a safetensors file, a directory, a malformed, truncated
// or oversized file (models::read_safetensors_bytes), a duplicate name, another tensor,
// another dtype or shape, a non-finite value (by row and column).
Tensor read_predict_inputs(const std::filesystem::path& path, const models::Model& model);
// The same from a file's bytes; `source` names them in errors.
Tensor read_predict_inputs_bytes(std::span<const std::byte> bytes, const std::string& source,
                                 const models::Model& model);

// Throws PredictError (`what`, then the row and element) when an f32 tensor of rows holds a NaN or
// an infinity; other dtypes pass.
void require_finite_rows(const Tensor& x, const std::string& what);

// Outputs: one tensor named "output" ([N, ...] f32), written atomically; `__metadata__` format
// "tandem-predictions" and the model's description.
void write_predict_outputs(const std::filesystem::path& path, const Tensor& outputs,
                           const std::string& model_name);

}  // namespace tandem::train
