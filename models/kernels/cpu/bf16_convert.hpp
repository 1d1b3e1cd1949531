#pragma once

#include <cstdint>

#include "runtime/dtype.hpp"

namespace tandem::models::cpu {

// y[i] = x[i] rounded to bf16, to nearest with ties to even (as BFloat16::from_float): NaN stays
// a (quiet) NaN, infinities stay infinite, and finite values above bf16's largest round to
// infinity. Vectorised, and parallel over large n.
void to_bf16(const float* x, BFloat16* y, std::int64_t n);

// The same over the rows of a row-major [rows, cols] matrix: y[r * ldy + c] = bf16(x[r * ldx +
// c]) (packing a strided operand).
void to_bf16_rows(const float* x, std::int64_t ldx, BFloat16* y, std::int64_t ldy,
                  std::int64_t rows, std::int64_t cols);

// y[i] = x[i] rounded to bf16 as to_bf16 does and widened again, in one pass (exactly
// from_bf16 of to_bf16's result). y may be x.
void round_to_bf16(const float* x, float* y, std::int64_t n);

// y[i] = x[i] widened to f32 (exact).
void from_bf16(const BFloat16* x, float* y, std::int64_t n);

}  // namespace tandem::models::cpu
