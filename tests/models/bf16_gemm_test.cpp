// The CPU bf16 GEMM (models/kernels/cpu/bf16_gemm.hpp) and the f32 -> bf16 rounding it is fed
// through (bf16_convert.hpp). Products of bf16 operands are exact in f32, so against an f64
// reference of the rounded operands only f32 accumulation error remains (a tight bound); against
// the f32 GEMM of the unrounded operands, bf16's operand rounding (a loose one).
#include "models/kernels/cpu/bf16_gemm.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/kernels/cpu/bf16_convert.hpp"
#include "models/kernels/cpu/gemm.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/kernels.hpp"

namespace tandem::models::testing {
namespace {

using cpu::GemmThreading;

std::vector<float> random_floats(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<BFloat16> rounded(const std::vector<float>& x) {
  std::vector<BFloat16> y(x.size());
  cpu::to_bf16(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  return y;
}

std::vector<float> widened(const std::vector<BFloat16>& x) {
  std::vector<float> y(x.size());
  cpu::from_bf16(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  return y;
}

struct Case {
  bool trans_a, trans_b;
  std::int64_t m, n, k;
  float alpha, beta;
  // Padding beyond the stored rows (leading dimension = row length + pad).
  std::int64_t pad;
};

std::string name(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         (c.trans_a ? " A^T" : "") + (c.trans_b ? " B^T" : "") + " alpha " +
         std::to_string(c.alpha) + " beta " + std::to_string(c.beta) + " pad " +
         std::to_string(c.pad);
}

// Checks one case against both references.
void check(const Case& c) {
  SCOPED_TRACE(name(c));
  const std::int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const std::int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const std::int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
  const std::vector<float> a32 = random_floats(a_rows * lda, 1);
  const std::vector<float> b32 = random_floats(b_rows * ldb, 2);
  const std::vector<float> c0 = random_floats(c.m * ldc, 3);
  const std::vector<BFloat16> a16 = rounded(a32), b16 = rounded(b32);
  const std::vector<float> ar = widened(a16), br = widened(b16);

  std::vector<float> c16 = c0;
  cpu::bf16_gemm(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, a16.data(), lda, b16.data(), ldb,
                 c.beta, c16.data(), ldc);
  std::vector<float> c32 = c0;
  cpu::gemm(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, a32.data(), lda, b32.data(), ldb, c.beta,
            c32.data(), ldc);

  const auto at = [&](const std::vector<float>& x, std::int64_t i, std::int64_t p) {
    return static_cast<double>(c.trans_a ? x[p * lda + i] : x[i * lda + p]);
  };
  const auto bt = [&](const std::vector<float>& x, std::int64_t p, std::int64_t j) {
    return static_cast<double>(c.trans_b ? x[j * ldb + p] : x[p * ldb + j]);
  };
  const double eps32 = std::numeric_limits<float>::epsilon();
  const double eps16 = 1.0 / 256.0;  // bf16's unit roundoff is 2^-9; one ulp 2^-8
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = 0; j < c.n; ++j) {
      double ref = 0.0, mag = 0.0;
      for (std::int64_t p = 0; p < c.k; ++p) {
        const double prod = at(ar, i, p) * bt(br, p, j);
        ref += prod;
        mag += std::abs(prod);
      }
      const double before = c0[static_cast<std::size_t>(i * ldc + j)];
      ref = c.alpha * ref + c.beta * before;
      mag = std::abs(c.alpha) * mag + std::abs(c.beta * before);
      const double got = c16[static_cast<std::size_t>(i * ldc + j)];
      // f32 accumulation of exact products: each partial sum rounds once.
      ASSERT_NEAR(got, ref, 2.0 * (static_cast<double>(c.k) + 2.0) * eps32 * mag + 1e-30)
          << "bf16 GEMM against f64 of the rounded operands at (" << i << ", " << j << ")";
      // Each operand's rounding moves each product by up to 2^-8 of itself.
      ASSERT_NEAR(got, c32[static_cast<std::size_t>(i * ldc + j)], 2.0 * eps16 * mag + 1e-30)
          << "bf16 GEMM against f32 GEMM at (" << i << ", " << j << ")";
    }
  }
  // Padding beyond each row of C is never written.
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t j = c.n; j < ldc; ++j)
      ASSERT_EQ(c16[static_cast<std::size_t>(i * ldc + j)],
                c0[static_cast<std::size_t>(i * ldc + j)])
          << "padding of C written at (" << i << ", " << j << ")";
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      out.push_back({ta, tb, 1, 1, 1, 1.0f, 0.0f, 0});
      out.push_back({ta, tb, 7, 13, 29, 1.0f, 0.0f, 0});
      out.push_back({ta, tb, 33, 17, 65, 1.0f, 1.0f, 3});
      out.push_back({ta, tb, 5, 130, 9, 0.5f, 1.0f, 1});
      // Large enough to be split into tiles (rows, then columns), odd so the last tile is short.
      out.push_back({ta, tb, 211, 67, 301, 1.0f, 1.0f, 0});
      out.push_back({ta, tb, 45, 203, 257, 1.0f, 0.0f, 2});
    }
  return out;
}

TEST(Bf16Gemm, MatchesReferencesForEveryTransposeAndShape) {
  if (!cpu::bf16_gemm_native()) GTEST_SKIP() << "no AVX512-BF16 or AMX on this CPU";
  for (const Case& c : cases()) check(c);
}

TEST(Bf16Gemm, MatchesReferencesOnOneThreadAndWithBlasThreading) {
  if (!cpu::bf16_gemm_native()) GTEST_SKIP() << "no AVX512-BF16 or AMX on this CPU";
  cpu::run_on_threads(1, [] {
    for (const Case& c : cases()) check(c);
  });
  const GemmThreading before = cpu::gemm_threading();
  cpu::set_gemm_threading(GemmThreading::blas_threads);
  for (const Case& c : cases()) check(c);
  cpu::set_gemm_threading(before);
}

TEST(Bf16Gemm, EmptyReductionScalesC) {
  std::vector<float> c = {1.0f, 2.0f, 3.0f, 4.0f};
  cpu::bf16_gemm(false, false, 2, 2, 0, 1.0f, nullptr, 0, nullptr, 2, 1.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
  cpu::bf16_gemm(false, false, 2, 2, 0, 1.0f, nullptr, 0, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}));
}

TEST(Bf16Gemm, RunsANonReferenceImplementation) {
  if (!cpu::bf16_gemm_native()) GTEST_SKIP() << "no AVX512-BF16 or AMX on this CPU";
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const std::string impl = cpu::bf16_gemm_impl(ta, tb, 256, 1024, 1024);
      EXPECT_EQ(impl.find("ref"), std::string::npos)
          << impl << (ta ? " A^T" : "") << (tb ? " B^T" : "");
      RecordProperty(std::string("impl") + (ta ? "_at" : "") + (tb ? "_bt" : ""), impl);
    }
}

TEST(Bf16Gemm, KernelsRoundAStridedOrTransposed) {
  // Kernels::gemm_bf16 packs a padded f32 A into bf16 itself: the same as rounding it first.
  if (!cpu::bf16_gemm_native()) GTEST_SKIP() << "no AVX512-BF16 or AMX on this CPU";
  const std::unique_ptr<Kernels> k16 = make_cpu_kernels(true);
  const std::int64_t m = 19, n = 23, k = 37, pad = 5;
  for (const bool ta : {false, true}) {
    const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, lda = a_cols + pad;
    const std::vector<float> a32 = random_floats(a_rows * lda, 6);
    const std::vector<BFloat16> a16 = rounded(a32), b16 = rounded(random_floats(k * n, 7));
    std::vector<float> want(static_cast<std::size_t>(m * n)), got(want.size());
    cpu::bf16_gemm(ta, false, m, n, k, 1.0f, a16.data(), lda, b16.data(), n, 0.0f, want.data(), n);
    k16->gemm_bf16(ta, false, m, n, k, 1.0f, a32.data(), lda, b16.data(), n, 0.0f, got.data(), n);
    EXPECT_EQ(got, want) << (ta ? "A^T" : "A");
  }
}

float from_bits(std::uint32_t u) {
  return std::bit_cast<float>(u);
}

std::uint16_t bits_of(float x) {
  BFloat16 y;
  cpu::to_bf16(&x, &y, 1);
  return y.bits;
}

TEST(Bf16Convert, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(bits_of(1.0f), 0x3f80);
  // Below half an ulp rounds down, above rounds up.
  EXPECT_EQ(bits_of(from_bits(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(bits_of(from_bits(0x3f808001u)), 0x3f81);
  // Exactly half: to the even neighbour, down from an even one, up from an odd one.
  EXPECT_EQ(bits_of(from_bits(0x3f808000u)), 0x3f80);
  EXPECT_EQ(bits_of(from_bits(0x3f818000u)), 0x3f82);
  EXPECT_EQ(bits_of(from_bits(0xbf818000u)), 0xbf82);
  // A carry into the exponent, and past the largest finite bf16 to infinity.
  EXPECT_EQ(bits_of(from_bits(0x3fffffffu)), 0x4000);
  EXPECT_EQ(bits_of(std::numeric_limits<float>::max()), 0x7f80);
  // Subnormals round like any other value.
  EXPECT_EQ(bits_of(from_bits(0x00008000u)), 0x0000);
  EXPECT_EQ(bits_of(from_bits(0x00018000u)), 0x0002);
}

TEST(Bf16Convert, KeepsInfinitiesAndNaNs) {
  EXPECT_EQ(bits_of(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(bits_of(-std::numeric_limits<float>::infinity()), 0xff80);
  // A NaN whose payload lies only in the low bits would round to infinity if rounded as a
  // number; it stays a quiet NaN of the same sign.
  EXPECT_EQ(bits_of(from_bits(0x7f800001u)), 0x7fc0);
  EXPECT_EQ(bits_of(from_bits(0xff800001u)), 0xffc0);
  EXPECT_TRUE(std::isnan(BFloat16{bits_of(std::numeric_limits<float>::quiet_NaN())}.to_float()));
}

TEST(Bf16Convert, LongVectorsMatchTheScalarRounding) {
  // Long enough for the parallel, vectorised path; with every edge case in it.
  std::vector<float> x = random_floats(100003, 4);
  std::mt19937 rng(5);
  for (float& v : x)
    v = std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) ^
                             static_cast<std::uint32_t>(rng() & 0xffffu));
  x[17] = std::numeric_limits<float>::infinity();
  x[18] = std::numeric_limits<float>::quiet_NaN();
  x[19] = from_bits(0x7f800001u);
  x[20] = from_bits(0x3f808000u);
  const std::vector<BFloat16> y = rounded(x);
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y[i].bits, BFloat16::from_float(x[i]).bits) << "at " << i << " of " << x[i];
  const std::vector<float> back = widened(y);
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(back[i]), std::uint32_t(y[i].bits) << 16) << "at " << i;
  // Rounded in place, in one pass: bit for bit what the two conversions give.
  std::vector<float> in_place = x;
  cpu::round_to_bf16(in_place.data(), in_place.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(in_place[i]), std::bit_cast<std::uint32_t>(back[i]))
        << "at " << i << " of " << x[i];
  }
}

}  // namespace
}  // namespace tandem::models::testing
