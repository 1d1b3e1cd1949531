#include "models/detail/meta.hpp"

#include <stdexcept>
#include <vector>

namespace tandem::models::detail {
namespace {

void push64(std::vector<std::int32_t>& v, std::uint64_t x) {
  v.push_back(static_cast<std::int32_t>(static_cast<std::uint32_t>(x & 0xffffffffu)));
  v.push_back(static_cast<std::int32_t>(static_cast<std::uint32_t>(x >> 32)));
}

std::uint64_t pop64(const std::int32_t* p) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(p[0])) |
         (static_cast<std::uint64_t>(static_cast<std::uint32_t>(p[1])) << 32);
}

}  // namespace

Tensor encode_shape(const Shape& shape) {
  std::vector<std::int32_t> v;
  for (const std::int64_t d : shape) push64(v, static_cast<std::uint64_t>(d));
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
}

Shape decode_shape(const Tensor& meta) {
  if (meta.dtype() != DType::i32 || meta.rank() != 1 || meta.numel() % 2 != 0) {
    throw std::invalid_argument("saved shape record is malformed: " + meta.describe());
  }
  const std::int32_t* p = meta.data<std::int32_t>();
  Shape s;
  for (std::int64_t i = 0; i < meta.numel(); i += 2)
    s.push_back(static_cast<std::int64_t>(pop64(p + i)));
  return s;
}

Tensor encode_dropout(const DropoutKey& k) {
  std::vector<std::int32_t> v;
  push64(v, k.key);
  push64(v, static_cast<std::uint64_t>(k.first_sample));
  return Tensor::from_vector(v, {4});
}

DropoutKey decode_dropout(const Tensor& meta) {
  if (meta.dtype() != DType::i32 || meta.numel() != 4) {
    throw std::invalid_argument("saved dropout record is malformed: " + meta.describe());
  }
  const std::int32_t* p = meta.data<std::int32_t>();
  return {pop64(p), static_cast<std::int64_t>(pop64(p + 2))};
}

}  // namespace tandem::models::detail
