// bf16 products on the CPU (docs/benchmarks.md, "bf16 products on the CPU"): GFLOP/s of
// [256 x 1024] x [1024 x 1024] as (a) OpenBLAS sgemm in f32 through cpu::gemm, (b) Tandem's
// bf16 path cpu::bf16_gemm, with and without rounding A from f32 first (a Linear layer's
// activations; its weights' bf16 copy is kept), and (c) one oneDNN matmul primitive called
// directly on its own OpenMP threads, the ceiling (b) should reach. Argument: threads (1, 2).
// Then a Linear(1024 -> 1024) layer's forward and backward (three such products) on 256 rows,
// on f32 kernels and on bf16 ones (make_cpu_kernels(true): activations rounded per call, the
// weight's copy from the cache).
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "json_line_reporter.hpp"
#include "models/kernels/cpu/bf16_convert.hpp"
#include "models/kernels/cpu/bf16_gemm.hpp"
#include "models/kernels/cpu/gemm.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/kernels.hpp"
#include "models/layers/linear.hpp"

namespace {

using namespace tandem;
using namespace tandem::models;

constexpr std::int64_t kM = 256, kK = 1024, kN = 1024;

void set_flops(benchmark::State& state) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * kM * kN * kK / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

std::vector<float> filled(std::int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(i % 17) - 1.0f;
  return v;
}

std::vector<BFloat16> to_bf16(const std::vector<float>& x) {
  std::vector<BFloat16> y(x.size());
  cpu::to_bf16(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  return y;
}

// Runs the timed loop inside a oneTBB arena of `threads` workers, as a stage given that share
// of the cores would.
template <class Fn>
void on_threads(benchmark::State& state, const Fn& fn) {
  cpu::run_on_threads(static_cast<int>(state.range(0)), [&] {
    for (auto _ : state) fn();
  });
  set_flops(state);
}

void BM_SgemmF32(benchmark::State& state) {
  const std::vector<float> a = filled(kM * kK, 0.01f), b = filled(kK * kN, 0.02f);
  std::vector<float> c(kM * kN);
  on_threads(state, [&] {
    cpu::gemm(false, false, kM, kN, kK, 1.0f, a.data(), kK, b.data(), kN, 0.0f, c.data(), kN);
    benchmark::DoNotOptimize(c.data());
  });
  state.SetLabel(cpu::blas_corename());
}

void BM_TandemBf16(benchmark::State& state) {
  const std::vector<BFloat16> a = to_bf16(filled(kM * kK, 0.01f)),
                              b = to_bf16(filled(kK * kN, 0.02f));
  std::vector<float> c(kM * kN);
  on_threads(state, [&] {
    cpu::bf16_gemm(false, false, kM, kN, kK, 1.0f, a.data(), kK, b.data(), kN, 0.0f, c.data(), kN);
    benchmark::DoNotOptimize(c.data());
  });
  state.SetLabel(cpu::bf16_gemm_impl(false, false, kM, kN, kK));
}

void BM_TandemBf16RoundingA(benchmark::State& state) {
  const std::vector<float> a32 = filled(kM * kK, 0.01f);
  std::vector<BFloat16> a(a32.size());
  const std::vector<BFloat16> b = to_bf16(filled(kK * kN, 0.02f));
  std::vector<float> c(kM * kN);
  on_threads(state, [&] {
    cpu::to_bf16(a32.data(), a.data(), kM * kK);
    cpu::bf16_gemm(false, false, kM, kN, kK, 1.0f, a.data(), kK, b.data(), kN, 0.0f, c.data(), kN);
    benchmark::DoNotOptimize(c.data());
  });
}

// One primitive for the whole product, made and run with an OpenMP team of `threads`: oneDNN
// threading itself, with no tiles of ours.
void BM_OneDnnDirect(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc a_md({kM, kK}, dt::bf16, tag::ab), b_md({kK, kN}, dt::bf16, tag::ab),
      c_md({kM, kN}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  const dnnl::matmul matmul(pd);
  std::vector<BFloat16> a = to_bf16(filled(kM * kK, 0.01f)), b = to_bf16(filled(kK * kN, 0.02f));
  std::vector<float> c(kM * kN);
  const dnnl::memory ma(a_md, engine, a.data()), mb(b_md, engine, b.data()),
      mc(c_md, engine, c.data());
  for (auto _ : state) {
    matmul.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    stream.wait();
    benchmark::DoNotOptimize(c.data());
  }
  omp_set_num_threads(saved);
  set_flops(state);
  state.SetLabel(pd.impl_info_str());
}

// Forward, then input and weight gradients (backward_into), of Linear(kK -> kN) on kM rows.
void BM_LinearStep(benchmark::State& state) {
  const bool bf16 = state.range(1) != 0;
  const std::unique_ptr<Kernels> kernels = make_cpu_kernels(bf16);
  Context ctx;
  ctx.kernels = kernels.get();
  const Linear layer(kK, kN);
  Tensor w = Tensor::empty({kN, kK}), b = Tensor::zeros({kN}), x = Tensor::empty({kM, kK}),
         dy = Tensor::empty({kM, kN});
  for (Tensor* t : {&w, &x, &dy}) {
    const std::vector<float> v = filled(t->numel(), 0.01f);
    std::copy(v.begin(), v.end(), t->data<float>());
  }
  const std::vector<Tensor> params = {w, b};
  std::vector<Tensor> grads = {Tensor::zeros({kN, kK}), Tensor::zeros({kN})};
  cpu::run_on_threads(static_cast<int>(state.range(0)), [&] {
    for (auto _ : state) {
      ForwardResult f = layer.forward(ctx, params, x);
      benchmark::DoNotOptimize(
          layer.backward_into(ctx, params, f.saved, dy, true, GradSink{grads}));
    }
  });
  state.counters["GFLOP/s"] = benchmark::Counter(3 * 2.0 * kM * kN * kK / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(bf16 ? "bf16" : "f32");
}

BENCHMARK(BM_SgemmF32)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TandemBf16)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TandemBf16RoundingA)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OneDnnDirect)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_LinearStep)
    ->ArgNames({"threads", "bf16"})
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  cpu::init_threading();
  if (!cpu::bf16_gemm_native()) {
    std::printf(
        "no AVX512-BF16 or AMX on this CPU: oneDNN would emulate bf16; nothing to measure\n");
    return 0;
  }
  return tandem::bench::run_benchmarks(argc, argv, "bf16_gemm");
}
