#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/tensor.hpp"

namespace tandem::models {

// How a parameter is initialised (deterministic given a seed).
enum class Init : std::uint8_t {
  zeros,
  ones,
  normal,          // N(0, scale^2)
  uniform_fan_in,  // U(-b, b), b = scale / sqrt(fan_in) (PyTorch's Linear/Conv default at scale 1)
};

// uniform_fan_in at this scale has variance 2 / fan_in: He initialisation, for layers that feed
// a ReLU.
inline constexpr float kHeScale = 2.449489742783178f;  // sqrt(6)

struct ParamSpec {
  std::string name;  // local to its layer: "weight", "bias", "attn.qkv.weight"
  Shape shape;
  Init init = Init::zeros;
  float scale = 1.0f;
  std::int64_t fan_in = 1;  // for uniform_fan_in
  // False for a buffer (batch norm's running statistics): optimizers leave it alone (no update,
  // no weight decay, no gradient norm); its layer updates it in Layer::update_buffers from what
  // its backward wrote into the buffer's gradient slot, which slices sum and replicas reduce
  // like any gradient.
  bool trainable = true;
};

// An ordered set of named tensors: a model's (or a stage's) weights, their gradients, or
// optimizer state. Copying a ParamSet copies handles (cheap, shares storage): that is how a
// weight version is kept while training goes on; optimizers update shared tensors
// copy-on-write (see Tensor::storage_unique), so a kept copy never changes under its holder.
class ParamSet {
 public:
  // Appends; throws std::invalid_argument when the name exists.
  void add(std::string name, Tensor tensor);

  std::int64_t size() const { return static_cast<std::int64_t>(tensors_.size()); }
  bool empty() const { return tensors_.empty(); }
  const std::string& name(std::int64_t i) const { return names_.at(static_cast<std::size_t>(i)); }
  const Tensor& operator[](std::int64_t i) const {
    return tensors_.at(static_cast<std::size_t>(i));
  }
  Tensor& operator[](std::int64_t i) { return tensors_.at(static_cast<std::size_t>(i)); }
  const std::vector<std::string>& names() const { return names_; }

  bool contains(std::string_view name) const;
  // Throws std::out_of_range naming the missing parameter.
  std::int64_t index_of(std::string_view name) const;
  const Tensor& at(std::string_view name) const;
  Tensor& at(std::string_view name);

  // Tensors [begin, begin + count) in order (a layer's parameters are contiguous).
  std::span<const Tensor> range(std::int64_t begin, std::int64_t count) const;
  std::span<Tensor> range(std::int64_t begin, std::int64_t count);

  std::int64_t numel() const;
  std::size_t nbytes() const;

  // Deep copy (new storage for every tensor).
  ParamSet clone() const;
  // Same names and shapes, zero-filled.
  ParamSet zeros_like() const;
  // Element-wise this += other (names must match in order); used to sum gradients of slices.
  void add_(const ParamSet& other);
  void scale_(float factor);
  // The entries whose names are in `names` (in this set's order), as handles.
  ParamSet subset(std::span<const std::string> names) const;
  // Appends all entries of other (names must not collide): joins stages' sets.
  void merge(const ParamSet& other);

  // Checksum of all values (bit pattern based): cheap determinism checks in tests and logs.
  // combine_fingerprints of each entry's tensor_fingerprint, in order, so processes holding
  // parts of a model can fingerprint the whole without moving its weights.
  std::uint64_t fingerprint() const;
  static std::uint64_t tensor_fingerprint(const std::string& name, const Tensor& tensor);
  static std::uint64_t combine_fingerprints(std::span<const std::uint64_t> parts);

 private:
  std::vector<std::string> names_;
  std::vector<Tensor> tensors_;
  // Looked up by string_view without a temporary string (a layer's names pass the small-string
  // size: a lookup per layer op would allocate).
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const {
      return std::hash<std::string_view>{}(name);
    }
  };
  std::unordered_map<std::string, std::int64_t, NameHash, std::equal_to<>> index_;
};

// The index of the first NaN or infinity among a floating tensor's values (f32, bf16); none for
// a tensor whose values are all finite, or that is not floating. Weights read from a file are
// checked with it: a run that starts from them would fail at its first step, blaming the
// learning rate.
std::optional<std::int64_t> first_non_finite(const Tensor& tensor);

// "holds nan at element 12 of 400 (shape [20, 20])": the tensor's first non-finite value; none
// when every value is finite.
std::optional<std::string> non_finite_value(const Tensor& tensor);

// "tensor 'NAME' holds nan at element ...": for `set`'s first tensor with a non-finite value;
// none when every value is finite.
std::optional<std::string> non_finite_entry(const ParamSet& set);

// Fills `tensor` per spec, deterministically from (seed, stream): the same seed and stream give
// the same values whatever else is initialised.
void init_param(Tensor& tensor, const ParamSpec& spec, std::uint64_t seed, std::uint64_t stream);

}  // namespace tandem::models
