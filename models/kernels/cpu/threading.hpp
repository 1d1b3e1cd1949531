#pragma once

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cstdint>
#include <functional>

namespace tandem::models::cpu {

// How the CPU kernels share the cores (see docs/numerics.md):
//   tbb_tiles (default): BLAS runs single-threaded; the one oneTBB pool runs everything, and a
//     large GEMM is cut into one tile per worker. Kernels may call BLAS from parallel loops.
//   blas_threads: BLAS keeps its own threads and big GEMMs are one call from the calling
//     thread; parallel loops must then never call BLAS (kept for comparison in benchmarks).
enum class GemmThreading { tbb_tiles, blas_threads };

// Once per process, before the first BLAS call (every GEMM entry calls it): sets the GEMM
// threading policy from TANDEM_GEMM_THREADING ("tbb" or "blas", default tbb) and BLAS's thread
// count to match.
void init_threading();
GemmThreading gemm_threading();
// Switches policy (benchmarks only; not while kernels run on other threads).
void set_gemm_threading(GemmThreading policy);
int num_threads();  // workers of the oneTBB pool
// Runs fn on the calling thread with the kernels' parallel loops limited to `threads` workers
// (a oneTBB arena of its own): a share of the cores, as a profile of concurrent stages takes.
void run_on_threads(int threads, const std::function<void()>& fn);
const char* blas_corename();  // OpenBLAS kernel set in use, "unknown" for other BLAS

// Runs body(begin, end) over [0, n), in parallel when n exceeds `grain` (the smallest chunk
// worth a task). Work per index must not depend on which chunk runs it.
template <class Body>
void parallel_for(std::int64_t n, std::int64_t grain, const Body& body) {
  if (n <= 0) return;
  if (n <= grain) {
    body(std::int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<std::int64_t>& r) { body(r.begin(), r.end()); });
}

// Elements per task for memory-bound element-wise loops (about 64 KiB of floats).
inline constexpr std::int64_t kElementGrain = 16384;

}  // namespace tandem::models::cpu
