#include "models/kernels/cpu/bf16_convert.hpp"

#include <algorithm>
#include <bit>

#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/cpu/vectorize.hpp"

namespace tandem::models::cpu {
namespace {

// BFloat16::from_float's bits of the f32 with bits `u`, branch-free (a select per lane instead of
// an early return) so that the loops below vectorise.
inline std::uint32_t bf16_bits(std::uint32_t u) {
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (u >> 16) | 0x40u;
  return (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}

TANDEM_VECTOR_CLONES
void to_bf16_range(const float* x, BFloat16* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    y[i].bits = static_cast<std::uint16_t>(bf16_bits(std::bit_cast<std::uint32_t>(x[i])));
  }
}

TANDEM_VECTOR_CLONES
void from_bf16_range(const BFloat16* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = std::bit_cast<float>(static_cast<std::uint32_t>(x[i].bits) << 16);
}

TANDEM_VECTOR_CLONES
void round_to_bf16_range(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = std::bit_cast<float>(bf16_bits(std::bit_cast<std::uint32_t>(x[i])) << 16);
}

}  // namespace

void round_to_bf16(const float* x, float* y, std::int64_t n) {
  parallel_for(n, kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
    round_to_bf16_range(x + i0, y + i0, i1 - i0);
  });
}

void to_bf16(const float* x, BFloat16* y, std::int64_t n) {
  parallel_for(n, kElementGrain,
               [&](std::int64_t i0, std::int64_t i1) { to_bf16_range(x + i0, y + i0, i1 - i0); });
}

void to_bf16_rows(const float* x, std::int64_t ldx, BFloat16* y, std::int64_t ldy,
                  std::int64_t rows, std::int64_t cols) {
  if (cols <= 0) return;
  const std::int64_t grain = std::max<std::int64_t>(1, kElementGrain / cols);
  parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) to_bf16_range(x + r * ldx, y + r * ldy, cols);
  });
}

void from_bf16(const BFloat16* x, float* y, std::int64_t n) {
  parallel_for(n, kElementGrain,
               [&](std::int64_t i0, std::int64_t i1) { from_bf16_range(x + i0, y + i0, i1 - i0); });
}

}  // namespace tandem::models::cpu
