#include "runtime/dtype.hpp"

#include <stdexcept>
#include <string>

namespace tandem {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
  }
  throw std::invalid_argument("dtype_size: invalid DType value " +
                              std::to_string(static_cast<int>(dtype)));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
  }
  throw std::invalid_argument("dtype_name: invalid DType value " +
                              std::to_string(static_cast<int>(dtype)));
}

DType parse_dtype(std::string_view text) {
  if (text == "f32" || text == "float32") return DType::f32;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  if (text == "i32" || text == "int32") return DType::i32;
  throw std::invalid_argument("parse_dtype: unknown dtype '" + std::string(text) +
                              "' (expected f32, bf16 or i32)");
}

}  // namespace tandem
