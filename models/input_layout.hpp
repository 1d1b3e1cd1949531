#pragma once
// A graph model's named inputs (GraphSpec::inputs) and how they travel: one input is the model
// input as it is; two or more are packed into one [batch, width] tensor of their common dtype,
// each input's per-sample values flattened, in declaration order. The runtime moves one tensor
// per minibatch either way; the layers that read an input read its columns
// (models/layers/input_view.hpp).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/graph_spec.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models {

struct InputColumns {
  std::string name;
  Shape shape;  // per sample
  DType dtype = DType::f32;
  std::int64_t begin = 0, end = 0;  // its columns of the packed tensor
};

// A tensor handed to the model under an input's name.
using NamedTensor = std::pair<std::string, Tensor>;

class InputLayout {
 public:
  InputLayout() = default;
  // Throws std::invalid_argument naming the input: no name, a name given twice, an empty or
  // non-positive shape, a dtype other than f32 or i32, several inputs of different dtypes.
  static InputLayout of(const GraphSpec& graph);

  bool packed() const { return inputs_.size() > 1; }
  const std::vector<InputColumns>& inputs() const { return inputs_; }
  const InputColumns* find(const std::string& name) const;
  std::int64_t width() const { return width_; }
  DType dtype() const { return inputs_.empty() ? DType::f32 : inputs_.front().dtype; }
  // The model input of a minibatch: [batch, width] packed, else [batch, shape...].
  Shape batch_shape(std::int64_t batch) const;
  // "src: i32[8], tgt: i32[8]"
  std::string describe() const;

  // The model input from tensors named after the inputs, each [batch, shape...] of its dtype,
  // on the CPU. Throws std::invalid_argument naming the input and both shapes (or the dtype)
  // where one does not fit, and for a name given twice, missing or unknown.
  Tensor pack(const std::vector<NamedTensor>& named) const;

 private:
  std::vector<InputColumns> inputs_;
  std::int64_t width_ = 0;
};

}  // namespace tandem::models
