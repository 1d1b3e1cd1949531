#include "models/input_layout.hpp"

#include <cstring>
#include <set>
#include <stdexcept>

namespace tandem::models {
namespace {

// Per-sample sizes beyond this are a mistake, not a model (and would overflow the packed width).
constexpr std::int64_t kMaxInputElements = std::int64_t{1} << 40;

[[noreturn]] void fail(const std::string& name, const std::string& why) {
  throw std::invalid_argument("model input '" + name + "': " + why);
}

DType parse_dtype(const GraphInput& in) {
  if (in.dtype == "f32") return DType::f32;
  if (in.dtype == "i32") return DType::i32;
  fail(in.name, "dtype '" + in.dtype + "' (expected f32 or i32)");
}

std::string dt(DType d) {
  return std::string(dtype_name(d));
}

Shape with_batch(std::int64_t batch, const Shape& per_sample) {
  Shape s{batch};
  s.insert(s.end(), per_sample.begin(), per_sample.end());
  return s;
}

}  // namespace

void InputLayout::pack_as_floats(const InputColumns& c, const Tensor& ids, std::int64_t batch,
                                 float* out) const {
  const auto* src = static_cast<const std::int32_t*>(ids.raw_data());
  const std::int64_t n = c.end - c.begin;
  for (std::int64_t r = 0; r < batch; ++r) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t v = src[r * n + i];
      if (v >= kExactFloatIds || v <= -kExactFloatIds) {
        fail(c.name, "value " + std::to_string(v) + " (sample " + std::to_string(r) + ", element " +
                         std::to_string(i) +
                         ") travels as a float beside f32 inputs, which holds integers only "
                         "below 2^24 exactly");
      }
      out[r * width_ + c.begin + i] = static_cast<float>(v);
    }
  }
}

InputLayout InputLayout::of(const GraphSpec& graph) {
  InputLayout out;
  std::set<std::string> names;
  for (const GraphInput& in : graph.declared_inputs()) {
    if (in.name.empty()) throw std::invalid_argument("model input: an input has no name");
    if (!names.insert(in.name).second) fail(in.name, "declared twice");
    if (in.shape.empty()) fail(in.name, "has no shape");
    std::int64_t n = 1;
    for (const std::int64_t d : in.shape) {
      if (d <= 0) fail(in.name, "dimensions must be positive, got " + shape_str(in.shape));
      if (d > kMaxInputElements / n) fail(in.name, "has more than 2^40 elements per sample");
      n *= d;
    }
    if (out.width_ > kMaxInputElements - n) fail(in.name, "the inputs exceed 2^40 elements");
    InputColumns c{in.name, in.shape, parse_dtype(in), out.width_, out.width_ + n};
    // One dtype travels as it is; a mix travels as f32 (f32 holds every id below 2^24 exactly,
    // i32 holds no fraction).
    out.dtype_ = out.inputs_.empty() || c.dtype == out.dtype_ ? c.dtype : DType::f32;
    out.width_ += n;
    out.inputs_.push_back(std::move(c));
  }
  return out;
}

const InputColumns* InputLayout::find(const std::string& name) const {
  for (const InputColumns& c : inputs_) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Shape InputLayout::batch_shape(std::int64_t batch) const {
  if (packed()) return {batch, width_};
  return with_batch(batch, inputs_.empty() ? Shape{} : inputs_.front().shape);
}

std::string InputLayout::describe() const {
  std::string out;
  for (const InputColumns& c : inputs_) {
    out += (out.empty() ? "" : ", ") + c.name + ": " + dt(c.dtype) + shape_str(c.shape);
  }
  return out;
}

Tensor InputLayout::pack(const std::vector<NamedTensor>& named) const {
  std::vector<const Tensor*> given(inputs_.size(), nullptr);
  for (const auto& [name, t] : named) {
    const InputColumns* c = find(name);
    if (c == nullptr) fail(name, "the model has no such input (its inputs: " + describe() + ")");
    const std::size_t k = static_cast<std::size_t>(c - inputs_.data());
    if (given[k] != nullptr) fail(name, "given twice");
    given[k] = &t;
  }
  std::int64_t batch = -1;
  for (std::size_t k = 0; k < inputs_.size(); ++k) {
    const InputColumns& c = inputs_[k];
    if (given[k] == nullptr) fail(c.name, "missing (the model's inputs: " + describe() + ")");
    const Tensor& t = *given[k];
    if (!t.defined() || !t.device().is_cpu()) fail(c.name, "must be a tensor on the CPU");
    if (t.dtype() != c.dtype) {
      fail(c.name, "is " + dt(t.dtype()) + ", expected " + dt(c.dtype));
    }
    const std::int64_t b = t.shape().empty() ? -1 : t.shape()[0];
    if (b < 0 || t.shape() != with_batch(b, c.shape)) {
      fail(c.name, "shape " + shape_str(t.shape()) + ", expected [batch" +
                       shape_str(c.shape).replace(0, 1, ", "));
    }
    if (batch >= 0 && b != batch) {
      fail(c.name, "has " + std::to_string(b) + " samples, '" + inputs_[0].name + "' has " +
                       std::to_string(batch));
    }
    batch = b;
  }
  if (!packed()) return given[0]->clone();
  Tensor out = Tensor::empty({batch, width_}, dtype());
  auto* dst = static_cast<std::byte*>(out.raw_data());
  for (std::size_t k = 0; k < inputs_.size(); ++k) {
    const InputColumns& c = inputs_[k];
    if (converted(c)) {
      pack_as_floats(c, *given[k], batch, static_cast<float*>(out.raw_data()));
      continue;
    }
    const auto* src = static_cast<const std::byte*>(given[k]->raw_data());
    const std::size_t row = static_cast<std::size_t>(c.end - c.begin) * 4;
    for (std::int64_t r = 0; r < batch; ++r) {
      std::memcpy(dst + (static_cast<std::size_t>(r * width_ + c.begin) * 4),
                  src + static_cast<std::size_t>(r) * row, row);
    }
  }
  return out;
}

}  // namespace tandem::models
