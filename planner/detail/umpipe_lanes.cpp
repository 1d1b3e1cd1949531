#include "planner/detail/umpipe_lanes.hpp"

#include <algorithm>
#include <cstddef>

namespace tandem::planner::detail {
namespace {

constexpr int kLanes = kUmpipeLanes;

// Multi-versioned kernels: the widest vectors the CPU has, chosen once at load time (needs
// GNU ifuncs; elsewhere the compiler's baseline).
#if defined(__x86_64__) && defined(__linux__)
#define TANDEM_VECTOR_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#else
#define TANDEM_VECTOR_CLONES
#endif

// Every step is a max, an add or a select on whole lane vectors: no branch depends on the
// cuts. Affine costs are computed as fixed + per_sample * b, exactly as SliceCost's tables
// hold them.
template <bool Monotone, bool Affine, bool Waits>
[[gnu::always_inline]] inline void scan_lanes(const UmpipeLane& costs, int samples,
                                              const std::uint64_t* __restrict bits,
                                              const double* __restrict arrival,
                                              double* __restrict device, double* __restrict send,
                                              double* __restrict length, double* __restrict ready) {
  const double* __restrict time_table = costs.time;
  const double* __restrict delay_table = costs.delay;
  for (int k = 0; k < kLanes; ++k) {
    length[k] = 0;
    ready[k] = 0;
  }
  for (int i = 0; i < samples; ++i) {
    const std::size_t row = static_cast<std::size_t>(i) * kLanes;
    const std::uint64_t* __restrict word = bits + static_cast<std::size_t>(i / 64) * kLanes;
    const int shift = i % 64;
    for (int k = 0; k < kLanes; ++k) {
      const double len = length[k] + 1;
      // Every sample of the slice so far must have arrived; when arrivals never decrease,
      // the last one is the latest.
      const double needed = !Waits     ? 0.0
                            : Monotone ? arrival[row + k]
                                       : std::max(ready[k], arrival[row + k]);
      const double start = Waits ? std::max(device[k], needed) : device[k];
      double time, delay;
      if constexpr (Affine) {
        time = costs.fixed + costs.per_sample * len;
        delay = Monotone ? 0.0 : costs.delay_fixed + costs.delay_per_sample * len;
      } else {
        time = time_table[static_cast<int>(len)];
        delay = Monotone ? 0.0 : delay_table[static_cast<int>(len)];
      }
      const double done = start + time;
      if constexpr (Monotone) {
        send[row + k] = done;  // the spread adds the constant delay
      } else {
        send[row + k] = done + delay;
      }
      const bool here = ((word[k] >> shift) & 1) != 0;
      device[k] = here ? done : device[k];
      length[k] = here ? 0 : len;
      if constexpr (!Monotone && Waits) ready[k] = here ? 0 : needed;
    }
  }
}

#define TANDEM_SCAN_VARIANT(NAME, MONOTONE, AFFINE, WAITS)                                    \
  TANDEM_VECTOR_CLONES void NAME(const UmpipeLane& costs, int samples,                        \
                                 const std::uint64_t* __restrict bits,                        \
                                 const double* __restrict arrival, double* __restrict device, \
                                 double* __restrict send, double* __restrict scratch) {       \
    scan_lanes<MONOTONE, AFFINE, WAITS>(costs, samples, bits, arrival, device, send, scratch, \
                                        scratch + kLanes);                                    \
  }
TANDEM_SCAN_VARIANT(scan_table_first, false, false, false)
TANDEM_SCAN_VARIANT(scan_table, false, false, true)
TANDEM_SCAN_VARIANT(scan_affine_first, false, true, false)
TANDEM_SCAN_VARIANT(scan_affine, false, true, true)
TANDEM_SCAN_VARIANT(scan_monotone_table_first, true, false, false)
TANDEM_SCAN_VARIANT(scan_monotone_table, true, false, true)
TANDEM_SCAN_VARIANT(scan_monotone_affine_first, true, true, false)
TANDEM_SCAN_VARIANT(scan_monotone_affine, true, true, true)
#undef TANDEM_SCAN_VARIANT

TANDEM_VECTOR_CLONES void spread_lanes(int samples, const std::uint64_t* __restrict bits,
                                       const double* __restrict send, double delay,
                                       double* __restrict spread) {
  const std::size_t last = static_cast<std::size_t>(samples - 1) * kLanes;
  for (int k = 0; k < kLanes; ++k) spread[last + k] = send[last + k] + delay;
  for (int i = samples - 2; i >= 0; --i) {
    const std::size_t row = static_cast<std::size_t>(i) * kLanes;
    const std::uint64_t* __restrict word = bits + static_cast<std::size_t>(i / 64) * kLanes;
    const int shift = i % 64;
    for (int k = 0; k < kLanes; ++k) {
      const bool here = ((word[k] >> shift) & 1) != 0;
      const double arrives = send[row + k] + delay;  // unconditional: the select vectorizes
      spread[row + k] = here ? arrives : spread[row + kLanes + k];
    }
  }
}

}  // namespace

void umpipe_scan(const UmpipeLane& lane, bool monotone, int samples, const std::uint64_t* bits,
                 const double* arrival, double* device, double* send, double* scratch) {
  using Kernel = void (*)(const UmpipeLane&, int, const std::uint64_t*, const double*, double*,
                          double*, double*);
  static constexpr Kernel kernels[2][2][2] = {
      {{scan_table_first, scan_table}, {scan_affine_first, scan_affine}},
      {{scan_monotone_table_first, scan_monotone_table},
       {scan_monotone_affine_first, scan_monotone_affine}}};
  kernels[monotone][lane.affine][arrival != nullptr](lane, samples, bits, arrival, device, send,
                                                     scratch);
}

void umpipe_spread(int samples, const std::uint64_t* bits, const double* send, double delay,
                   double* spread) {
  spread_lanes(samples, bits, send, delay, spread);
}

}  // namespace tandem::planner::detail
