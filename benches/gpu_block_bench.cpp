// GPT transformer blocks on cuda:0, forward and backward, against the cuBLAS ceiling measured in
// the same run (issue 15: "GPT blocks at realistic sizes ... against the measured cuBLAS ceiling,
// and the same blocks in PyTorch"). scripts/gpu-bench runs it beside scripts/torch_block_bench.py
// (the same blocks in PyTorch eager) over a grid of sizes and precisions.
//
//   bench_gpu_block [--layers 2] [--d-model 1024] [--heads d_model/64] [--seq 1024] [--batch 8]
//                   [--precision f32|tf32|bf16] [--iters 20] [--warmup 5] [--gemm-reps 20]
//                   [--epilogue-reps 0]
//
// What runs: the zoo's GPT (Model::build(gpt_spec), dropout 0) with `layers` blocks; only the
// block layers [1, 1 + layers) are run (no embedding, final norm or head), through a
// CudaExecutor (make_executor(cuda:0, ..., precision)): Model::forward on a random input on the
// device, then Model::backward from a random output gradient into a gradient ParamSet (written,
// beta 0) with the input gradient (need_dx: the blocks sit in the middle of a model).
//
// Timing (host wall clock, the way scripts/torch_block_bench.py times PyTorch): each measured
// iteration submits the forward, waits for its completion, then the backward and waits again;
// forward, backward and their sum are the medians over `iters` iterations after `warmup`
// unmeasured ones. "pipelined" submits `iters` forward+backward iterations back to back (at most
// two in flight; the host runs ahead of the device) and reports the mean.
//
// FLOPs are Layer::cost's (TransformerBlock::cost), the same formula the Python script uses,
// with n = batch * seq, d = d_model, f = d_ff = 4 d, t = seq:
//   maps = 2 n (4 d^2 + 2 d f)              (qkv, attention projection, MLP: 2 per multiply-add)
//   core = 2 * 2 * batch * t (t + 1) / 2 * d  (scores and weighted sum over the causal half)
//   forward = maps + core, backward input = maps + 2 core, backward weight = maps
// per block; element-wise work (norms, softmax, GELU, residuals, biases) counts as zero. The
// attention kernels compute the full t x t square, so the causal count is the useful work only.
//
// The ceiling: models::cuda::gemm (the same wrapper the layers use, so bf16 includes the
// conversion of the f32 operands) at the same precision, on the MLP's first product:
// [batch * seq, d_model] x [d_model, 4 d_model]^T, back to back on a stream of its own; the
// median over 5 samples of `gemm-reps` products.
//
// With --epilogue-reps N > 0, the same product with its bias and GELU, timed two ways the same
// way (median over 5 samples of N): cuda::gemm then bias_act_forward, as the layers run it, and
// cuda::linear_forward_epilogue (cuBLASLt's GELU_AUX_BIAS epilogue; at bf16 on bf16 operands, so
// without the conversions). Printed and reported under "epilogue".
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/executor.hpp"
#include "models/model.hpp"
#include "runtime/device.hpp"
#include "runtime/stream.hpp"
#include "runtime/tensor.hpp"

#if TANDEM_HAVE_CUDA
#include <cuda_runtime.h>

#include "models/kernels/cuda/activation.hpp"
#include "models/kernels/cuda/gemm.hpp"
#include "models/kernels/cuda/gemm_epilogue.hpp"
#endif

namespace tandem::models {
namespace {

struct Options {
  std::int64_t layers = 2;
  std::int64_t d_model = 1024;
  std::int64_t heads = 0;  // 0: d_model / 64
  std::int64_t seq = 1024;
  std::int64_t batch = 8;
  MatmulPrecision precision = MatmulPrecision::f32;
  int iters = 20;
  int warmup = 5;
  int gemm_reps = 20;
  int epilogue_reps = 0;  // 0: no epilogue comparison
};

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--layers N] [--d-model D] [--heads H] [--seq T] [--batch B]\n"
               "          [--precision f32|tf32|bf16] [--iters N] [--warmup N] [--gemm-reps N]\n"
               "          [--epilogue-reps N]\n",
               argv0);
}

// --key value or --key=value; throws std::invalid_argument on anything else.
Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (const std::size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw std::invalid_argument("missing value for " + arg);
    }
    auto integer = [&]() -> std::int64_t {
      std::size_t used = 0;
      const long long v = std::stoll(value, &used);
      if (used != value.size() || v < 0) {
        throw std::invalid_argument(arg + ": '" + value + "' is not a non-negative integer");
      }
      return v;
    };
    if (arg == "--layers") {
      o.layers = integer();
    } else if (arg == "--d-model") {
      o.d_model = integer();
    } else if (arg == "--heads") {
      o.heads = integer();
    } else if (arg == "--seq") {
      o.seq = integer();
    } else if (arg == "--batch") {
      o.batch = integer();
    } else if (arg == "--precision") {
      o.precision = parse_matmul_precision(value);
    } else if (arg == "--iters") {
      o.iters = static_cast<int>(integer());
    } else if (arg == "--warmup") {
      o.warmup = static_cast<int>(integer());
    } else if (arg == "--gemm-reps") {
      o.gemm_reps = static_cast<int>(integer());
    } else if (arg == "--epilogue-reps") {
      o.epilogue_reps = static_cast<int>(integer());
    } else {
      throw std::invalid_argument("unknown option " + arg);
    }
  }
  if (o.heads == 0) o.heads = std::max<std::int64_t>(1, o.d_model / 64);
  if (o.layers < 1 || o.d_model < 1 || o.seq < 1 || o.batch < 1 || o.iters < 1 || o.gemm_reps < 1) {
    throw std::invalid_argument(
        "--layers, --d-model, --seq, --batch, --iters, --gemm-reps must be >= 1");
  }
  return o;
}

#if TANDEM_HAVE_CUDA

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

cuda::GemmPrecision gemm_precision(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::f32:
      return cuda::GemmPrecision::f32;
    case MatmulPrecision::tf32:
      return cuda::GemmPrecision::tf32;
    case MatmulPrecision::bf16:
      return cuda::GemmPrecision::bf16;
  }
  return cuda::GemmPrecision::f32;
}

// Uniform in [-1, 1) from a 64-bit LCG: cheap for tens of millions of values, never denormal.
Tensor random_on(Device device, const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  std::uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-52 - 1.0);
  }
  return t.to(device);
}

ParamSet to_device(const ParamSet& params, Device device) {
  ParamSet out;
  for (std::int64_t i = 0; i < params.size(); ++i) out.add(params.name(i), params[i].to(device));
  return out;
}

// TFLOP/s of models::cuda::gemm on the MLP's first product at `precision`: the median over 5
// samples of `reps` back-to-back products on a stream of its own.
double gemm_ceiling(const Options& o, Device device, std::int64_t* m_out, std::int64_t* n_out,
                    std::int64_t* k_out) {
  const std::int64_t m = o.batch * o.seq;
  const std::int64_t n = 4 * o.d_model;
  const std::int64_t k = o.d_model;
  *m_out = m;
  *n_out = n;
  *k_out = k;
  const Tensor a = random_on(device, {m, k}, 11);
  const Tensor b = random_on(device, {n, k}, 12);
  Tensor c = Tensor::empty({m, n}, DType::f32, device);
  Stream stream(device);
  const cuda::GemmPrecision precision = gemm_precision(o.precision);
  auto product = [&] {
    cuda::gemm(false, true, m, n, k, 1.0f, static_cast<const float*>(a.raw_data()), k,
               static_cast<const float*>(b.raw_data()), k, 0.0f, static_cast<float*>(c.raw_data()),
               n, precision, stream.native_handle());
  };
  for (int i = 0; i < 5; ++i) product();  // handle, workspace, bf16 buffers, clocks up
  stream.synchronize();
  std::vector<double> rates;
  for (int s = 0; s < 5; ++s) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < o.gemm_reps; ++i) product();
    stream.synchronize();
    const double ms = ms_since(t0) / o.gemm_reps;
    rates.push_back(2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) /
                    (ms * 1e-3) / 1e12);
  }
  return median(rates);
}

// Milliseconds per call of `call`: the median over 5 samples of `reps` back-to-back calls, after
// 5 unmeasured ones (handles, plans, buffers, clocks).
template <class Call>
double ms_per_call(int reps, Stream& stream, Call call) {
  for (int i = 0; i < 5; ++i) call();
  stream.synchronize();
  std::vector<double> samples;
  for (int s = 0; s < 5; ++s) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < reps; ++i) call();
    stream.synchronize();
    samples.push_back(ms_since(t0) / reps);
  }
  return median(samples);
}

struct EpilogueTimes {
  double unfused_ms = 0;  // cuda::gemm + bias_act_forward
  double fused_ms = 0;    // cuda::linear_forward_epilogue
};

// The MLP's first product with its bias and GELU, both ways (--epilogue-reps).
EpilogueTimes epilogue_times(const Options& o, Device device) {
  const cuda::LinearDims d{o.batch * o.seq, o.d_model, 4 * o.d_model};
  const bool bf16 = o.precision == MatmulPrecision::bf16;
  const DType operands = bf16 ? DType::bf16 : DType::f32;
  const Tensor x = random_on(device, {d.rows, d.in}, 21);
  const Tensor w = random_on(device, {d.out, d.in}, 22);
  const Tensor b = random_on(device, {d.out}, 23);
  const Tensor x_op = x.to(operands);
  const Tensor w_op = w.to(operands);
  const Tensor b_op = b.to(operands);
  Tensor y = Tensor::empty({d.rows, d.out}, operands, device);
  Tensor pre = Tensor::empty({d.rows, d.out}, operands, device);
  Stream stream(device);
  void* s = stream.native_handle();
  const cuda::GemmPrecision precision = gemm_precision(o.precision);
  auto f = [](const Tensor& t) { return static_cast<const float*>(t.raw_data()); };
  auto h = [](const Tensor& t) { return static_cast<const BFloat16*>(t.raw_data()); };
  EpilogueTimes t;
  Tensor y32 = Tensor::empty({d.rows, d.out}, DType::f32, device);
  Tensor pre32 = Tensor::empty({d.rows, d.out}, DType::f32, device);
  auto* y32p = static_cast<float*>(y32.raw_data());
  auto* pre32p = static_cast<float*>(pre32.raw_data());
  t.unfused_ms = ms_per_call(o.epilogue_reps, stream, [&] {
    cuda::gemm(false, true, d.rows, d.out, d.in, 1.0f, f(x), d.in, f(w), d.in, 0.0f, y32p, d.out,
               precision, s);
    cuda::bias_act_forward(y32p, f(b), d.rows, d.out, Activation::gelu, pre32p, s);
  });
  t.fused_ms = ms_per_call(o.epilogue_reps, stream, [&] {
    if (bf16) {
      cuda::linear_forward_epilogue(h(x_op), h(w_op), h(b_op), static_cast<BFloat16*>(y.raw_data()),
                                    static_cast<BFloat16*>(pre.raw_data()), d, Activation::gelu, s);
    } else {
      cuda::linear_forward_epilogue(f(x_op), f(w_op), f(b_op), static_cast<float*>(y.raw_data()),
                                    static_cast<float*>(pre.raw_data()), d, Activation::gelu,
                                    precision, s);
    }
  });
  return t;
}

int run(const Options& o) {
  const Device device = Device::cuda(0);
  cudaDeviceProp prop{};
  const std::string gpu = cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : "?";

  ModelSpec spec = gpt_spec(o.layers, o.d_model, o.heads, o.seq, 256);
  spec.dropout = 0.0f;
  const Model model = Model::build(spec);
  const int begin = 1;  // after the embedding (no dropout layer at p = 0)
  const int end = begin + static_cast<int>(o.layers);
  for (int i = begin; i < end; ++i) {
    if (model.layer(i).kind() != "transformer_block") {
      throw std::logic_error("layer " + std::to_string(i) + " is " + model.layer(i).kind() +
                             ", not a transformer block");
    }
  }

  // FLOPs of the range (Layer::cost), forward and backward (input and weight gradients).
  const Shape x_shape = {o.batch, o.seq, o.d_model};
  double forward_flops = 0;
  double backward_flops = 0;
  for (int i = begin; i < end; ++i) {
    const LayerCost c = model.layer(i).cost(x_shape);
    forward_flops += c.forward_flops;
    backward_flops += c.backward_input_flops + c.backward_weight_flops;
  }
  const double total_flops = forward_flops + backward_flops;

  std::int64_t gm = 0, gn = 0, gk = 0;
  const double ceiling = gemm_ceiling(o, device, &gm, &gn, &gk);

  const ParamSet host_params = model.init_params(1, begin, end);
  const ParamSet params = to_device(host_params, device);
  ParamSet grads = to_device(host_params.zeros_like(), device);
  const Tensor x = random_on(device, x_shape, 1);
  const Tensor dy = random_on(device, x_shape, 2);

  const std::unique_ptr<Executor> executor = make_executor(device, {}, 0, o.precision);
  Context ctx;
  ctx.training = true;
  ctx.keep_saved = true;
  ctx.seed = 7;

  // One measured iteration: forward, wait, backward, wait. Returns {forward ms, backward ms}.
  auto split_iteration = [&]() -> std::pair<double, double> {
    std::vector<Saved> saved;
    const Clock::time_point t0 = Clock::now();
    executor
        ->run(ctx, [&](const Context& c) { saved = model.forward(c, params, x, begin, end).saved; })
        .done.synchronize();
    const double fwd = ms_since(t0);
    const Clock::time_point t1 = Clock::now();
    executor
        ->run(ctx,
              [&](const Context& c) {
                (void)model.backward(c, params, saved, dy, begin, end, true, grads, 1.0f, 0.0f);
              })
        .done.synchronize();
    return {fwd, ms_since(t1)};
  };
  auto fused_work = [&](const Context& c) {
    std::vector<Saved> saved = model.forward(c, params, x, begin, end).saved;
    (void)model.backward(c, params, saved, dy, begin, end, true, grads, 1.0f, 0.0f);
  };

  for (int i = 0; i < o.warmup; ++i) (void)split_iteration();
  std::vector<double> fwd_ms, bwd_ms, total_ms;
  for (int i = 0; i < o.iters; ++i) {
    const auto [f, b] = split_iteration();
    fwd_ms.push_back(f);
    bwd_ms.push_back(b);
    total_ms.push_back(f + b);
  }
  // Back to back, at most two iterations in flight.
  std::vector<Event> done;
  const Clock::time_point tp = Clock::now();
  for (int i = 0; i < o.iters; ++i) {
    if (i >= 2) done[static_cast<std::size_t>(i - 2)].synchronize();
    done.push_back(executor->run(ctx, fused_work).done);
  }
  for (const Event& e : done) e.synchronize();
  const double pipelined_ms = ms_since(tp) / o.iters;

  const double f_ms = median(fwd_ms);
  const double b_ms = median(bwd_ms);
  const double t_ms = median(total_ms);
  auto tflops = [](double flops, double ms) { return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0; };
  const char* prec = matmul_precision_name(o.precision);

  std::printf(
      "GPT blocks on %s (%s): %lld blocks, d_model %lld, heads %lld, d_ff %lld, seq %lld, "
      "batch %lld, matmul precision %s; %d iterations after %d warm-up\n",
      device.str().c_str(), gpu.c_str(), static_cast<long long>(o.layers),
      static_cast<long long>(o.d_model), static_cast<long long>(o.heads),
      static_cast<long long>(4 * o.d_model), static_cast<long long>(o.seq),
      static_cast<long long>(o.batch), prec, o.iters, o.warmup);
  std::printf("%-28s %10s %10s %10s %10s\n", "", "ms/iter", "GFLOP", "TFLOP/s", "of cuBLAS");
  auto row = [&](const char* name, double ms, double flops) {
    const double r = tflops(flops, ms);
    std::printf("%-28s %10.3f %10.1f %10.2f %10.3f\n", name, ms, flops / 1e9, r,
                ceiling > 0 ? r / ceiling : 0.0);
  };
  row("forward (median)", f_ms, forward_flops);
  row("backward (median)", b_ms, backward_flops);
  row("forward+backward (median)", t_ms, total_flops);
  row("pipelined (mean)", pipelined_ms, total_flops);
  std::printf("cuBLAS ceiling: cuda::gemm %lldx%lldx%lld (m x n x k) at %s: %.2f TFLOP/s\n",
              static_cast<long long>(gm), static_cast<long long>(gn), static_cast<long long>(gk),
              prec, ceiling);
  EpilogueTimes epilogue;
  if (o.epilogue_reps > 0) {
    epilogue = epilogue_times(o, device);
    std::printf(
        "MLP product + bias + GELU at %s: gemm + bias_act_forward %.3f ms, cuBLASLt "
        "epilogue %.3f ms (%.2fx)\n",
        prec, epilogue.unfused_ms, epilogue.fused_ms,
        epilogue.fused_ms > 0 ? epilogue.unfused_ms / epilogue.fused_ms : 0.0);
  }

  const nlohmann::json line = {
      {"suite", "gpu_block"},
      {"impl", "tandem"},
      {"gpu", gpu},
      {"config",
       {{"layers", o.layers},
        {"d_model", o.d_model},
        {"heads", o.heads},
        {"d_ff", 4 * o.d_model},
        {"seq", o.seq},
        {"batch", o.batch},
        {"precision", prec},
        {"iters", o.iters},
        {"warmup", o.warmup}}},
      {"flops", {{"forward", forward_flops}, {"backward", backward_flops}, {"total", total_flops}}},
      {"results",
       {{"forward_ms", f_ms},
        {"backward_ms", b_ms},
        {"total_ms", t_ms},
        {"pipelined_ms", pipelined_ms},
        {"tflops", tflops(total_flops, t_ms)},
        {"pipelined_tflops", tflops(total_flops, pipelined_ms)},
        {"cublas_ceiling_tflops", ceiling},
        {"of_ceiling", ceiling > 0 ? tflops(total_flops, t_ms) / ceiling : 0.0}}},
      {"ceiling_gemm", {{"m", gm}, {"n", gn}, {"k", gk}}}};
  nlohmann::json out = line;
  if (o.epilogue_reps > 0) {
    out["epilogue"] = {{"unfused_ms", epilogue.unfused_ms}, {"fused_ms", epilogue.fused_ms}};
  }
  std::printf("BENCH_JSON %s\n", out.dump().c_str());
  return 0;
}

#endif  // TANDEM_HAVE_CUDA

}  // namespace
}  // namespace tandem::models

int main(int argc, char** argv) {
  using namespace tandem::models;
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_block: %s\n", e.what());
    usage(argv[0]);
    return 2;
  }
#if TANDEM_HAVE_CUDA
  if (tandem::cuda_device_count() == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_block: %s\n", e.what());
    return 1;
  }
#else
  (void)options;
  std::printf("no CUDA backend\n");
  return 0;
#endif
}
