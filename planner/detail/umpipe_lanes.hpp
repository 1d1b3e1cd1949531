#pragma once
// The batch kernels of UmpipeBatchEvaluator (see umpipe_batch_evaluator.hpp): kUmpipeLanes
// individuals side by side, one stage and one direction per call.
//
// Layout: bits[(i / 64) * kUmpipeLanes + k] holds lane k's cut after sample i at bit i % 64;
// per-sample arrays hold sample i of lane k at [i * kUmpipeLanes + k].
#include <cstdint>

namespace tandem::planner::detail {

inline constexpr int kUmpipeLanes = 32;

// A stage's costs in one direction as the batch kernels take them: the compute time t(b) and
// the delay d(b) of sending a b-sample slice on, both affine or both tabulated (t(0..B)).
struct UmpipeLane {
  bool affine = false;
  double fixed = 0, per_sample = 0, delay_fixed = 0, delay_per_sample = 0;
  const double* time = nullptr;
  const double* delay = nullptr;
};

// Whether this CPU runs the AVX-512 kernels (AVX-512 F and DQ).
bool umpipe_avx512_available();

// Scans the samples in order: a slice starts once the device is free and all its samples have
// arrived (`arrival`; nullptr: they are all there from the start), `device` (kUmpipeLanes values)
// is updated to each slice's finish, and at every cut `send` gets the finish plus the delay (other
// samples get unspecified values). `monotone`: every link's delay is the same for all slice sizes,
// so arrivals never decrease along the samples and a slice need only look at its last sample's
// arrival; `send` then gets the bare finish and the spread adds the delay, lane.delay[1]. Same
// arithmetic, same order as UmpipeEvaluator.
// `scratch`: 2 kUmpipeLanes doubles of working space (the portable kernel's running slice
// lengths and arrival maxima: GCC vectorizes the loop with them in memory it does not own,
// not as local arrays).
void umpipe_scan(const UmpipeLane& lane, bool monotone, int samples, const std::uint64_t* bits,
                 const double* arrival, double* device, double* send, double* scratch);
void umpipe_scan_avx512(const UmpipeLane& lane, bool monotone, int samples,
                        const std::uint64_t* bits, const double* arrival, double* device,
                        double* send, double* scratch);

// spread[i] = send[the first cut at or after i] + delay: when sample i reaches the next stage.
// (A delay of +0 leaves the non-negative times as they are.)
void umpipe_spread(int samples, const std::uint64_t* bits, const double* send, double delay,
                   double* spread);
void umpipe_spread_avx512(int samples, const std::uint64_t* bits, const double* send, double delay,
                          double* spread);

}  // namespace tandem::planner::detail
