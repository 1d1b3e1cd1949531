#pragma once
// A graph model's named inputs (GraphSpec::inputs) and how they travel: one input is the model
// input as it is; two or more are packed into one [batch, width] tensor, each input's per-sample
// values flattened, in declaration order. The runtime moves one tensor per minibatch either way;
// the layers that read an input read its columns (models/layers/input_view.hpp).
//
// The packed tensor has the inputs' common dtype; inputs of mixed dtypes (f32 frames and i32
// caption tokens, say) travel as f32, each i32 value stored as the float of the same value. Only
// integers of magnitude below 2^24 are exact floats, so pack refuses any other, naming the input;
// the view turns the columns back into i32 (Kernels::f32_to_i32). Inputs of one dtype travel in
// that dtype, their bits copied unchanged.
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
  // non-positive shape, a dtype other than f32 or i32.
  static InputLayout of(const GraphSpec& graph);

  bool packed() const { return inputs_.size() > 1; }
  const std::vector<InputColumns>& inputs() const { return inputs_; }
  const InputColumns* find(const std::string& name) const;
  std::int64_t width() const { return width_; }
  // The model input's dtype: the inputs' common one, f32 where they mix.
  DType dtype() const { return dtype_; }
  // Whether `c`'s values travel converted (i32 ids as floats in a mixed packing).
  bool converted(const InputColumns& c) const { return c.dtype != dtype_; }
  // The model input of a minibatch: [batch, width] packed, else [batch, shape...].
  Shape batch_shape(std::int64_t batch) const;
  // "src: i32[8], tgt: i32[8]"
  std::string describe() const;

  // The model input from tensors named after the inputs, each [batch, shape...] of its dtype,
  // on the CPU. Throws std::invalid_argument naming the input and both shapes (or the dtype)
  // where one does not fit, for a name given twice, missing or unknown, and for an i32 value
  // that a mixed packing cannot hold exactly (magnitude 2^24 or more).
  Tensor pack(const std::vector<NamedTensor>& named) const;

 private:
  // Writes i32 `ids` [batch, c's columns] into the f32 packed rows `out` as exact floats.
  void pack_as_floats(const InputColumns& c, const Tensor& ids, std::int64_t batch,
                      float* out) const;

  std::vector<InputColumns> inputs_;
  std::int64_t width_ = 0;
  DType dtype_ = DType::f32;
};

// The largest magnitude (exclusive) of an i32 value in a mixed-dtype packing: 2^24, past which
// consecutive integers are no longer all floats.
inline constexpr std::int64_t kExactFloatIds = std::int64_t{1} << 24;

}  // namespace tandem::models
