// The sequence layers (Lstm, SeqAttention) on cuda:0 through CudaKernels against the same layers
// on the CPU: output, input gradients and weight gradients at f32 GEMM precision. The layers
// compute only through Kernels ops, so this checks that those ops compose on the GPU as on the
// CPU (strided copy_2d, GEMMs with leading dimensions, in-place activations). Built in every
// configuration; skips with "no CUDA device" unless the backend is built and a GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/device.hpp"
#include "tests/runtime/require_gpu.hpp"

#if TANDEM_HAVE_CUDA
#include "models/kernels/cuda/cuda_kernels.hpp"
#include "models/layers/lstm.hpp"
#include "models/layers/seq_attention.hpp"
#include "runtime/stream.hpp"
#include "tests/models/cuda_test_util.hpp"
#endif

namespace tandem::models {
namespace {

#if TANDEM_HAVE_CUDA
using namespace cuda_test;  // NOLINT(google-build-using-namespace): test helpers only

constexpr double kTolerance = 1e-4;

Tensor on_gpu(const Tensor& t) {
  Tensor g = Tensor::empty(t.shape(), t.dtype(), Device::cuda(0));
  g.copy_from(t);
  return g;
}

std::vector<float> to_host(const Tensor& t, Stream& stream) {
  stream.synchronize();
  return t.to_float_vector();
}

Tensor random_host(const Shape& shape, std::uint32_t seed) {
  return Tensor::from_vector(random_floats(shape_numel(shape), seed, -1.0f, 1.0f), shape);
}

// Forward, B (every input's gradient) and W of `layer` on both devices, compared.
void expect_layer_matches(const Layer& layer, const std::vector<Shape>& shapes) {
  const std::string who = layer.describe();
  std::vector<Tensor> params, gparams;
  std::uint32_t seed = 70;
  for (const ParamSpec& p : layer.param_specs()) {
    params.push_back(random_host(p.shape, seed++));
    gparams.push_back(on_gpu(params.back()));
  }
  std::vector<Tensor> xs, gxs;
  for (const Shape& s : shapes) {
    xs.push_back(random_host(s, seed++));
    gxs.push_back(on_gpu(xs.back()));
  }
  const std::vector<bool> want_all(shapes.size(), true);
  const Shape out = layer.output_shape_n(shapes);
  const Tensor dy = random_host(out, seed++);

  const Context cpu_ctx;
  ForwardResult want = layer.forward_n(cpu_ctx, params, xs);
  const std::vector<Tensor> want_dx =
      layer.backward_input_n(cpu_ctx, params, want.saved, dy, want_all);
  std::vector<Tensor> want_grads;
  for (const Tensor& p : params) want_grads.push_back(Tensor::zeros(p.shape()));
  layer.backward_weight_into(cpu_ctx, want.saved, dy, {want_grads, 1.0f, 0.0f});

  Stream stream(Device::cuda(0));
  const CudaKernels kernels(stream, cuda::GemmPrecision::f32);
  Context ctx;
  ctx.kernels = &kernels;
  const Tensor gdy = on_gpu(dy);
  ForwardResult got = layer.forward_n(ctx, gparams, gxs);
  const std::vector<Tensor> gdx = layer.backward_input_n(ctx, gparams, got.saved, gdy, want_all);
  std::vector<Tensor> grads;
  for (const Tensor& p : gparams) {
    grads.push_back(Tensor::full(p.shape(), NAN, DType::f32, Device::cuda(0)));
  }
  layer.backward_weight_into(ctx, got.saved, gdy, {grads, 1.0f, 0.0f});
  EXPECT_LE(rel_error(to_host(got.y, stream), want.y.to_float_vector()), kTolerance)
      << who << " output";
  for (std::size_t i = 0; i < gdx.size(); ++i) {
    EXPECT_LE(rel_error(to_host(gdx[i], stream), want_dx[i].to_float_vector()), kTolerance)
        << who << " gradient of input " << i;
  }
  for (std::size_t i = 0; i < grads.size(); ++i) {
    EXPECT_LE(rel_error(to_host(grads[i], stream), want_grads[i].to_float_vector()), kTolerance)
        << who << " gradient of " << layer.param_specs()[i].name;
  }
}
#endif  // TANDEM_HAVE_CUDA

TEST(CudaSequenceLayers, LstmMatchesTheCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  expect_layer_matches(Lstm(24, 32), {{4, 9, 24}});
  expect_layer_matches(Lstm(24, 16, true), {{3, 7, 24}});
#endif
}

TEST(CudaSequenceLayers, SeqAttentionMatchesTheCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  expect_layer_matches(SeqAttention(16, 24), {{3, 5, 16}, {3, 11, 24}});
#endif
}

}  // namespace
}  // namespace tandem::models
