// libFuzzer target for `tandem predict --input FILE`'s reader (train/predict_inputs.cpp): any
// bytes, read as the inputs of a model of f32 features (an MLP) and of one of i32 token ids (a
// GPT), either are refused with a train::PredictError or give a tensor in the model's input
// layout, finite where it holds floats; anything else (a crash, a sanitizer report, another
// exception, a tensor that breaks the layout) is a finding. Seeds: tests/fuzz/corpus/
// predict_inputs/.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "models/model.hpp"
#include "models/model_spec.hpp"
#include "train/predict_inputs.hpp"

namespace {

void read_as(const tandem::models::Model& model, std::span<const std::byte> bytes) {
  using namespace tandem;
  Tensor x;
  try {
    x = train::read_predict_inputs_bytes(bytes, "fuzz-input", model);
  } catch (const train::PredictError&) {
    return;
  }
  if (x.rank() == 0 || x.dim(0) < 1 || x.dtype() != model.input_dtype() ||
      x.shape() != model.input_shape(x.dim(0))) {
    __builtin_trap();
  }
  if (x.dtype() == DType::f32) {
    const float* v = x.data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      if (!std::isfinite(v[i])) __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem::models;
  static const Model mlp = Model::build(mlp_spec({6, 8, 3}));       // f32 [N, 6]
  static const Model gpt = Model::build(gpt_spec(1, 8, 2, 6, 11));  // i32 [N, 6]
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  read_as(mlp, bytes);
  read_as(gpt, bytes);
  return 0;
}
