#include "models/kernels/cpu/bf16_gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/kernels/cpu/threading.hpp"
#include "runtime/log.hpp"

namespace tandem::models::cpu {
namespace {

// As gemm.cpp: below this many FLOPs a product is not worth splitting, and tiles are multiples
// of this many rows/columns.
constexpr double kSplitFlops = 4.0e6;
constexpr std::int64_t kTileAlign = 16;

// Debian's oneDNN threads through OpenMP and sizes each call's team from the calling thread's
// omp_get_max_threads(), both when it makes a primitive (which plans its blocking for that many
// threads) and when it runs one. A oneTBB worker would otherwise start a team as large as the
// machine inside a tile, oversubscribing the cores; this sets the calling thread's team size for
// one scope (the setting is per thread, so other threads keep theirs).
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) {
    if (threads != saved_) omp_set_num_threads(threads);
  }
  ~OmpThreads() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

struct GemmShape {
  bool trans_a, trans_b;
  std::int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  int threads;
  bool operator==(const GemmShape&) const = default;
};

struct GemmShapeHash {
  std::size_t operator()(const GemmShape& s) const {
    std::size_t h = std::hash<std::int64_t>{}(s.m);
    const auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    for (const std::int64_t v : {s.n, s.k, s.lda, s.ldb, s.ldc}) mix(std::hash<std::int64_t>{}(v));
    mix(std::hash<float>{}(s.alpha));
    mix(std::hash<float>{}(s.beta));
    mix(static_cast<std::size_t>(s.threads) * 4 + (s.trans_a ? 2 : 0) + (s.trans_b ? 1 : 0));
    return h;
  }
};

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c, scratchpad;
  std::string impl;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

std::string describe(const GemmShape& s) {
  return "[" + std::to_string(s.m) + " x " + std::to_string(s.k) + "] x [" + std::to_string(s.k) +
         " x " + std::to_string(s.n) + "]" + (s.trans_a ? " A^T" : "") + (s.trans_b ? " B^T" : "");
}

std::shared_ptr<const Primitive> make_primitive(const GemmShape& s) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  // Strides give the transposes and leading dimensions, so no operand is ever copied.
  const dnnl::memory::desc a({s.m, s.k}, dt::bf16, s.trans_a ? dims{1, s.lda} : dims{s.lda, 1});
  const dnnl::memory::desc b({s.k, s.n}, dt::bf16, s.trans_b ? dims{1, s.ldb} : dims{s.ldb, 1});
  const dnnl::memory::desc c({s.m, s.n}, dt::f32, dims{s.ldc, 1});
  dnnl::primitive_attr attr;
  // A caller-owned scratchpad: the primitive then holds no per-run state, and several threads
  // may run it at once.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
  if (s.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(s.beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
  auto p = std::make_shared<Primitive>();
  p->matmul = dnnl::matmul(pd);
  p->a = a;
  p->b = b;
  p->c = c;
  p->scratchpad = pd.scratchpad_desc();
  p->impl = pd.impl_info_str();
  return p;
}

// Primitives by shape, made once: making one costs far more than a small product. Entries are
// never evicted (a model has few distinct shapes).
std::shared_ptr<const Primitive> primitive_for(const GemmShape& s) {
  static std::mutex mutex;
  static std::unordered_map<GemmShape, std::shared_ptr<const Primitive>, GemmShapeHash> cache;
  {
    const std::lock_guard lock(mutex);
    if (const auto it = cache.find(s); it != cache.end()) return it->second;
  }
  // Made outside the lock (two threads may both make one; the first stored wins).
  std::shared_ptr<const Primitive> made = make_primitive(s);
  const std::lock_guard lock(mutex);
  return cache.try_emplace(s, std::move(made)).first->second;
}

void run(const GemmShape& s, const BFloat16* a, const BFloat16* b, float* c) {
  const OmpThreads team(s.threads);
  try {
    const std::shared_ptr<const Primitive> p = primitive_for(s);
    thread_local std::vector<std::byte> scratch;
    if (scratch.size() < p->scratchpad.get_size()) scratch.resize(p->scratchpad.get_size());
    thread_local dnnl::stream stream(engine());
    // oneDNN's memory objects take non-const handles; it only reads A and B.
    const dnnl::memory ma(p->a, engine(), const_cast<BFloat16*>(a));
    const dnnl::memory mb(p->b, engine(), const_cast<BFloat16*>(b));
    const dnnl::memory mc(p->c, engine(), c);
    const dnnl::memory ms(p->scratchpad, engine(), scratch.data());
    p->matmul.execute(stream, {{DNNL_ARG_SRC, ma},
                               {DNNL_ARG_WEIGHTS, mb},
                               {DNNL_ARG_DST, mc},
                               {DNNL_ARG_SCRATCHPAD, ms}});
    stream.wait();
  } catch (const dnnl::error& e) {
    throw std::runtime_error("bf16_gemm: oneDNN matmul " + describe(s) + " on " +
                             std::to_string(s.threads) + " thread(s) failed: " + e.what());
  }
}

}  // namespace

bool bf16_gemm_native() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  // oneDNN's ISA values are bit sets, each including those below it; AMX includes AVX512-BF16.
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

bool bf16_gemm_native_or_warn() {
  static const bool native = [] {
    const bool yes = bf16_gemm_native();
    if (!yes)
      tandem::log::warn(
          "bf16 matrix products on the CPU run in f32: oneDNN finds neither AVX512-BF16 nor AMX "
          "here (effective ISA {:#x})",
          static_cast<unsigned>(dnnl::get_effective_cpu_isa()));
    return yes;
  }();
  return native;
}

void bf16_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               float alpha, const BFloat16* a, std::int64_t lda, const BFloat16* b,
               std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // An empty sum: C = beta * C (oneDNN refuses zero-sized reductions).
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  init_threading();
  const GemmShape whole{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, 1};
  const int workers = num_threads();
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (gemm_threading() == GemmThreading::blas_threads) {
    GemmShape s = whole;
    s.threads = workers;
    run(s, a, b, c);
    return;
  }
  if (workers <= 1 || flops < kSplitFlops) {
    run(whole, a, b, c);
    return;
  }
  // The split of gemm.cpp: the larger of M and N, one tile per worker, fixed by the shapes and
  // the worker count alone.
  const bool split_m = m >= n;
  const std::int64_t extent = split_m ? m : n;
  const std::int64_t units = (extent + kTileAlign - 1) / kTileAlign;
  const std::int64_t parts = std::min<std::int64_t>(workers, units);
  tbb::parallel_for(
      std::int64_t{0}, parts,
      [&](std::int64_t p) {
        const std::int64_t begin = std::min(extent, units * p / parts * kTileAlign);
        const std::int64_t end = std::min(extent, units * (p + 1) / parts * kTileAlign);
        if (begin >= end) return;
        GemmShape s = whole;
        if (split_m) {
          s.m = end - begin;
          run(s, trans_a ? a + begin : a + begin * lda, b, c + begin * ldc);
        } else {
          s.n = end - begin;
          run(s, a, trans_b ? b + begin * ldb : b + begin, c + begin);
        }
      },
      tbb::static_partitioner());
}

std::string bf16_gemm_impl(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                           std::int64_t k) {
  const GemmShape s{trans_a, trans_b, m, n, k, trans_a ? m : k, trans_b ? k : n, n, 1.0f, 0.0f, 1};
  try {
    const OmpThreads team(1);
    return primitive_for(s)->impl;
  } catch (const dnnl::error& e) {
    throw std::runtime_error("bf16_gemm_impl: oneDNN matmul " + describe(s) +
                             " failed: " + e.what());
  }
}

}  // namespace tandem::models::cpu
