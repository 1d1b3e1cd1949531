#include "models/kernels/cpu/threading.hpp"

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

// OpenBLAS entry points, weak so that another BLAS (BLA_VENDOR) links too. Declared here
// rather than through <cblas.h> so that no OpenBLAS-only header is needed.
extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
char* openblas_get_corename(void) __attribute__((weak));
}

namespace tandem::models::cpu {
namespace {

std::atomic<GemmThreading> g_policy{GemmThreading::tbb_tiles};
std::once_flag g_once;

void apply_policy(GemmThreading policy) {
  if (openblas_set_num_threads == nullptr) return;
  openblas_set_num_threads(policy == GemmThreading::tbb_tiles ? 1 : num_threads());
}

}  // namespace

void init_threading() {
  std::call_once(g_once, [] {
    const char* env = std::getenv("TANDEM_GEMM_THREADING");
    const GemmThreading policy = env != nullptr && std::string_view(env) == "blas"
                                     ? GemmThreading::blas_threads
                                     : GemmThreading::tbb_tiles;
    g_policy.store(policy);
    apply_policy(policy);
  });
}

GemmThreading gemm_threading() {
  init_threading();
  return g_policy.load(std::memory_order_relaxed);
}

void set_gemm_threading(GemmThreading policy) {
  init_threading();
  g_policy.store(policy);
  apply_policy(policy);
}

void run_on_threads(int threads, const std::function<void()>& fn) {
  tbb::task_arena arena(std::max(1, threads));
  arena.execute(fn);
}

int num_threads() {
  return tbb::this_task_arena::max_concurrency();
}

const char* blas_corename() {
  init_threading();
  return openblas_get_corename != nullptr ? openblas_get_corename() : "unknown";
}

}  // namespace tandem::models::cpu
