// The AVX-512 batch kernels: the portable kernels' arithmetic, written with mask registers
// so that a cut costs one vptestmq per 8 lanes and the selects fold into masked moves; the
// compiler's vectorization of the portable loops spends about twice the instructions.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "planner/detail/umpipe_lanes.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12's intrinsics build their unused result operands from _mm512_undefined_pd(), which
// -Wmaybe-uninitialized flags inside the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define TANDEM_HAVE_AVX512_KERNELS 1
#define TANDEM_AVX512 [[gnu::target("avx512f,avx512dq")]]
#else
#define TANDEM_HAVE_AVX512_KERNELS 0
#endif

namespace tandem::planner::detail {

#if TANDEM_HAVE_AVX512_KERNELS
namespace {

constexpr int kVectors = kUmpipeLanes / 8;

template <bool Monotone, bool Affine, bool Waits>
TANDEM_AVX512 void scan(const UmpipeLane& lane, int samples, const std::uint64_t* bits,
                        const double* arrival, double* device, double* send) {
  __m512d dev[kVectors], prev[kVectors], ready[kVectors];
  __m512i words[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    dev[v] = _mm512_loadu_pd(device + 8 * v);
    prev[v] = _mm512_set1_pd(-1.0);  // the cut before the first sample
    ready[v] = _mm512_setzero_pd();
    words[v] = _mm512_setzero_si512();
  }
  const __m512d fixed = _mm512_set1_pd(lane.fixed);
  const __m512d per_sample = _mm512_set1_pd(lane.per_sample);
  const __m512d delay_fixed = _mm512_set1_pd(lane.delay_fixed);
  const __m512d delay_per_sample = _mm512_set1_pd(lane.delay_per_sample);
  // Word by word; the sample index and its bit advance by an add each step.
  __m512d at = _mm512_setzero_pd();
  const __m512d one = _mm512_set1_pd(1.0);
  for (int first = 0; first < samples; first += 64) {
    for (int v = 0; v < kVectors; ++v) {
      words[v] = _mm512_loadu_si512(bits + (first / 64) * kUmpipeLanes + 8 * v);
    }
    __m512i bit = _mm512_set1_epi64(1);
    const int end = std::min(samples, first + 64);
    for (int i = first; i < end;
         ++i, bit = _mm512_add_epi64(bit, bit), at = _mm512_add_pd(at, one)) {
      const double* in = Waits ? arrival + static_cast<std::size_t>(i) * kUmpipeLanes : nullptr;
      double* out = send + static_cast<std::size_t>(i) * kUmpipeLanes;
      for (int v = 0; v < kVectors; ++v) {
        const __mmask8 cut = _mm512_test_epi64_mask(words[v], bit);
        // The slice so far is (prev, i]: its length is exact in a double.
        const __m512d len = _mm512_sub_pd(at, prev[v]);
        __m512d start = dev[v];
        if constexpr (Waits) {
          __m512d needed = _mm512_loadu_pd(in + 8 * v);
          if constexpr (!Monotone) {
            needed = _mm512_max_pd(ready[v], needed);
            ready[v] = _mm512_maskz_mov_pd(static_cast<__mmask8>(~cut), needed);
          }
          start = _mm512_max_pd(start, needed);
        }
        __m512d time;
        if constexpr (Affine) {
          time = _mm512_add_pd(fixed, _mm512_mul_pd(per_sample, len));
        } else {
          time = _mm512_mask_i64gather_pd(_mm512_setzero_pd(), cut, _mm512_cvttpd_epi64(len),
                                          lane.time, 8);
        }
        const __m512d done = _mm512_add_pd(start, time);
        if constexpr (Monotone) {
          _mm512_storeu_pd(out + 8 * v, done);  // the spread adds the constant delay
        } else if constexpr (Affine) {
          const __m512d delay = _mm512_add_pd(delay_fixed, _mm512_mul_pd(delay_per_sample, len));
          _mm512_storeu_pd(out + 8 * v, _mm512_add_pd(done, delay));
        } else {
          const __m512d delay = _mm512_mask_i64gather_pd(_mm512_setzero_pd(), cut,
                                                         _mm512_cvttpd_epi64(len), lane.delay, 8);
          _mm512_storeu_pd(out + 8 * v, _mm512_add_pd(done, delay));
        }
        dev[v] = _mm512_mask_mov_pd(dev[v], cut, done);
        prev[v] = _mm512_mask_mov_pd(prev[v], cut, at);
      }
    }
  }
  for (int v = 0; v < kVectors; ++v) _mm512_storeu_pd(device + 8 * v, dev[v]);
}

TANDEM_AVX512 void spread(int samples, const std::uint64_t* bits, const double* send, double delay,
                          double* out) {
  const __m512d add = _mm512_set1_pd(delay);
  __m512d value[kVectors];
  __m512i words[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    value[v] = _mm512_setzero_pd();
    words[v] = _mm512_setzero_si512();
  }
  __m512i bit = _mm512_setzero_si512();
  for (int i = samples - 1; i >= 0; --i, bit = _mm512_srli_epi64(bit, 1)) {
    const int shift = i % 64;
    if (i == samples - 1 || shift == 63) {
      bit = _mm512_set1_epi64(static_cast<long long>(std::uint64_t{1} << shift));
      for (int v = 0; v < kVectors; ++v) {
        words[v] = _mm512_loadu_si512(bits + (i / 64) * kUmpipeLanes + 8 * v);
      }
    }
    const std::size_t row = static_cast<std::size_t>(i) * kUmpipeLanes;
    for (int v = 0; v < kVectors; ++v) {
      const __mmask8 cut = _mm512_test_epi64_mask(words[v], bit);
      value[v] = _mm512_mask_add_pd(value[v], cut, _mm512_loadu_pd(send + row + 8 * v), add);
      _mm512_storeu_pd(out + row + 8 * v, value[v]);
    }
  }
}

}  // namespace

bool umpipe_avx512_available() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}

void umpipe_scan_avx512(const UmpipeLane& lane, bool monotone, int samples,
                        const std::uint64_t* bits, const double* arrival, double* device,
                        double* send, double* /*scratch*/) {
  using Kernel =
      void (*)(const UmpipeLane&, int, const std::uint64_t*, const double*, double*, double*);
  static constexpr Kernel kernels[2][2][2] = {
      {{scan<false, false, false>, scan<false, false, true>},
       {scan<false, true, false>, scan<false, true, true>}},
      {{scan<true, false, false>, scan<true, false, true>},
       {scan<true, true, false>, scan<true, true, true>}}};
  kernels[monotone][lane.affine][arrival != nullptr](lane, samples, bits, arrival, device, send);
}

void umpipe_spread_avx512(int samples, const std::uint64_t* bits, const double* send, double delay,
                          double* out) {
  spread(samples, bits, send, delay, out);
}

#else

bool umpipe_avx512_available() {
  return false;
}

void umpipe_scan_avx512(const UmpipeLane&, bool, int, const std::uint64_t*, const double*, double*,
                        double*, double*) {
  throw std::logic_error("umpipe_scan_avx512: not built for this CPU");
}

void umpipe_spread_avx512(int, const std::uint64_t*, const double*, double, double*) {
  throw std::logic_error("umpipe_spread_avx512: not built for this CPU");
}

#endif

}  // namespace tandem::planner::detail
