// One training step (forward, backward, SGD update) of the zoo's models on the CPU, through the
// path `tandem train` runs (a one-stage actors::Pipeline: loader, stage actor, coordinator, the
// stage's fused SGD update), against this machine's sgemm ceiling.
//
// FLOPs counted are those the step needs, from Layer::cost: 2 per multiply-add of every GEMM-like
// product (linear maps, convolutions, attention scores and weighted sums over the causal half
// only), forward + weight gradient for every layer, input gradient for every layer but the first
// (nobody needs the gradient of the data). Element-wise work (bias, activations, norms, softmax,
// the loss, the update) is memory bound and counted as zero. The ceiling is OpenBLAS sgemm 1024^3
// under the same threading policy, measured between pipeline runs (see run_train_step).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "actors/pipeline.hpp"
#include "benches/json_line_reporter.hpp"
#include "models/kernels/cpu/gemm.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "runtime/scheduler.hpp"
#include "schedules/plan.hpp"

namespace tandem::models {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median GFLOP/s of sgemm 1024^3 under one threading policy.
double sgemm_gflops(cpu::GemmThreading policy, int reps) {
  constexpr std::int64_t n = 1024;
  const cpu::GemmThreading before = cpu::gemm_threading();
  cpu::set_gemm_threading(policy);
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  std::vector<double> rates;
  for (int r = 0; r < reps + 2; ++r) {
    const Clock::time_point t0 = Clock::now();
    cpu::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (r >= 2) rates.push_back(2.0 * n * n * n / seconds_since(t0) / 1e9);  // 2 warm-ups
  }
  cpu::set_gemm_threading(before);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

void BM_Sgemm1024(benchmark::State& state) {
  const auto policy = static_cast<cpu::GemmThreading>(state.range(0));
  constexpr std::int64_t n = 1024;
  const cpu::GemmThreading before = cpu::gemm_threading();
  cpu::set_gemm_threading(policy);
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  for (auto _ : state) {
    cpu::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  cpu::set_gemm_threading(before);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(policy == cpu::GemmThreading::tbb_tiles ? "tbb tiles" : "blas threads");
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double step_flops(const Model& model, std::int64_t batch) {
  Shape shape = model.input_shape(batch);
  double flops = 0;
  for (int i = 0; i < model.num_layers(); ++i) {
    const LayerCost c = model.layer(i).cost(shape);
    flops += c.forward_flops + c.backward_weight_flops + (i > 0 ? c.backward_input_flops : 0.0);
    shape = model.layer(i).output_shape(shape);
  }
  return flops;
}

Tensor fill_inputs(const Model& model, std::int64_t batch) {
  const Shape shape = model.input_shape(batch);
  if (model.input_dtype() == DType::i32) {
    Tensor t = Tensor::empty(shape, DType::i32);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      t.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7919) % model.spec().vocab);
    }
    return t;
  }
  Tensor t = Tensor::empty(shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
  }
  return t;
}

Tensor fill_targets(const Model& model, std::int64_t batch, std::int64_t classes) {
  Tensor t = Tensor::empty(model.target_shape(batch), DType::i32);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 104729) % classes);
  }
  return t;
}

// Steps per pipeline run: a run starts and ends with an empty pipeline, which a one-stage
// pipeline does not notice, and its set-up (threads, a copy of the weights) is not timed.
constexpr std::int64_t kStepsPerRun = 4;

void run_train_step(benchmark::State& state, const ModelSpec& spec, std::int64_t batch,
                    std::int64_t classes) {
  const auto policy = static_cast<cpu::GemmThreading>(state.range(0));
  const cpu::GemmThreading before = cpu::gemm_threading();
  cpu::set_gemm_threading(policy);
  const Model model = Model::build(spec);
  ParamSet params = model.init_params(1);
  const Tensor x = fill_inputs(model, batch);
  const Tensor y = fill_targets(model, batch, classes);
  const double flops = step_flops(model, batch);
  // What `tandem train` builds for a config without a pipeline section: one stage of every
  // layer on the CPU, 1F1B with one slice, plain SGD (fused into the backward). A small rate
  // keeps the weights' magnitude steady however many steps the benchmark runs.
  schedules::ScheduleParams sp;
  sp.kind = schedules::ScheduleKind::one_f_one_b;
  sp.stages = 1;
  sp.slices = 1;
  sp.minibatch_size = static_cast<int>(batch);
  sp.minibatches = kStepsPerRun;
  schedules::StagePlan stage;
  stage.layers = {0, model.num_layers()};
  stage.replicas = {schedules::Placement{"", "cpu"}};
  const schedules::Plan plan = schedules::Plan::make({stage}, sp);
  std::int64_t first = 0;
  auto run_pipeline = [&]() -> std::pair<double, double> {
    actors::PipelineSpec ps;
    ps.model = &model;
    ps.plan = plan;
    ps.optimizer = {.kind = "sgd", .lr = 1e-4};
    ps.initial_params = params;
    ps.data = [&x, &y](std::int64_t) { return actors::MinibatchData::whole(x, y); };
    ps.first_minibatch = first;
    actors::Pipeline pipeline(std::move(ps), make_work_sharing({}));
    const Clock::time_point t0 = Clock::now();
    const actors::PipelineResult r = pipeline.run();
    const double dt = seconds_since(t0);
    params = pipeline.params();
    first += kStepsPerRun;
    return {dt, r.losses.back()};
  };
  (void)run_pipeline();  // warm-up: first-touch of every buffer
  // Other processes share this machine's cores, and how much they take drifts. So the ceiling
  // is re-measured next to every run (one sgemm 1024^3 under the same policy, untimed), and
  // the fraction reported is the median over runs of step rate / adjacent sgemm rate.
  constexpr std::int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  std::vector<double> ratios;
  std::vector<double> ceilings;
  double seconds = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const Clock::time_point t0 = Clock::now();
    cpu::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double ceiling = 2.0 * n * n * n / seconds_since(t0) / 1e9;
    state.ResumeTiming();
    const auto [dt, loss] = run_pipeline();
    state.SetIterationTime(dt);
    seconds += dt;
    ratios.push_back(flops * kStepsPerRun / dt / 1e9 / ceiling);
    ceilings.push_back(ceiling);
    benchmark::DoNotOptimize(loss);
  }
  cpu::set_gemm_threading(before);
  const double steps = static_cast<double>(state.iterations() * kStepsPerRun);
  state.counters["GFLOP/step"] = flops / 1e9;
  state.counters["GFLOP/s"] = flops * steps / seconds / 1e9;
  state.counters["sgemm"] = median(ceilings);
  state.counters["of_sgemm"] = median(ratios);
  state.counters["samples/s"] = static_cast<double>(batch) * steps / seconds;
  state.counters["ms/step"] = seconds / steps * 1e3;
  state.SetLabel(policy == cpu::GemmThreading::tbb_tiles ? "tbb tiles" : "blas threads");
}

// 8 x Linear(1024, 1024) with ReLU on the first seven (the zoo's mlp ends in logits), batch 256.
void BM_TrainStepMlp(benchmark::State& state) {
  run_train_step(state, mlp_spec(std::vector<std::int64_t>(9, 1024)), 256, 1024);
}

// GPT: 14 blocks, d_model 256, 8 heads, seq 64, vocab 8192, batch 32.
void BM_TrainStepGpt(benchmark::State& state) {
  run_train_step(state, gpt_spec(14, 256, 8, 64, 8192), 32, 8192);
}

// VGG-16 at width 1/8 on 32x32 images, 10 classes, batch 64.
void BM_TrainStepVggSmall(benchmark::State& state) {
  run_train_step(state, vgg16_small_spec(10), 64, 10);
}

constexpr auto kTiles = static_cast<std::int64_t>(cpu::GemmThreading::tbb_tiles);
constexpr auto kBlas = static_cast<std::int64_t>(cpu::GemmThreading::blas_threads);

BENCHMARK(BM_Sgemm1024)
    ->Arg(kTiles)
    ->Arg(kBlas)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();
// Manual time: each iteration is one pipeline run of kStepsPerRun steps, timed from start to
// end of Pipeline::run (the set-up and the adjacent sgemm are not).
BENCHMARK(BM_TrainStepMlp)
    ->Arg(kTiles)
    ->Arg(kBlas)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseManualTime();
BENCHMARK(BM_TrainStepGpt)
    ->Arg(kTiles)
    ->Arg(kBlas)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseManualTime();
BENCHMARK(BM_TrainStepVggSmall)
    ->Arg(kTiles)
    ->Arg(kBlas)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseManualTime();

}  // namespace
}  // namespace tandem::models

int main(int argc, char** argv) {
  using namespace tandem::models;
  cpu::init_threading();
  const double tiles = sgemm_gflops(cpu::GemmThreading::tbb_tiles, 15);
  const double blas = sgemm_gflops(cpu::GemmThreading::blas_threads, 15);
  std::printf(
      "sgemm 1024^3 (OpenBLAS %s kernels, %d workers): %.1f GFLOP/s as tbb tiles, %.1f with BLAS "
      "threads (medians at start; each train step is compared with an sgemm run next to it)\n",
      cpu::blas_corename(), cpu::num_threads(), tiles, blas);
  return tandem::bench::run_benchmarks(argc, argv, "train_step");
}
