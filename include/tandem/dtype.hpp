#pragma once
// Part of Tandem's public API (docs/embedding.md): the element types a tensor holds. The runtime
// uses these very types (runtime/dtype.hpp includes this header). Includes only the standard
// library.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem {

// Element types a Tensor can hold. bf16 is a storage format only: kernels convert to f32,
// compute in f32 and convert back (round to nearest even).
enum class DType : std::uint8_t { f32, bf16, i32 };

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
// Inverse of dtype_name ("f32", "bf16", "i32"); throws std::invalid_argument naming `text`.
DType parse_dtype(std::string_view text);

// The bits of a bfloat16: the upper half of an IEEE f32. A distinct type so that
// Tensor::data<BFloat16>() is checked against the tensor's dtype like the others.
struct BFloat16 {
  std::uint16_t bits = 0;

  static BFloat16 from_float(float value) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
    if ((u & 0x7fffffffu) > 0x7f800000u)
      return BFloat16{std::uint16_t((u >> 16) | 0x40u)};        // quiet NaN
    const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // ties to even
    return BFloat16{std::uint16_t((u + rounding) >> 16)};
  }
  float to_float() const { return std::bit_cast<float>(std::uint32_t(bits) << 16); }
  friend bool operator==(BFloat16, BFloat16) = default;
};

// Maps a C++ element type to its DType (used by Tensor::data<T>() to check access).
template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::i32;
};

}  // namespace tandem
