// The image layers on CUDA against the CPU: batch norm (training, evaluation, the running
// statistics update), average and global average pooling, a rectangular convolution and a
// padded max pool, each layer run whole through CudaKernels (forward, B, W). Skipped without a
// GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/stream.hpp"
#include "runtime/tensor.hpp"
#include "tests/runtime/require_gpu.hpp"

#if TANDEM_HAVE_CUDA
#include "models/kernels/cuda/cuda_kernels.hpp"
#include "models/layer.hpp"
#include "models/layers/avg_pool2d.hpp"
#include "models/layers/batch_norm2d.hpp"
#include "models/layers/conv2d.hpp"
#include "models/layers/global_avg_pool2d.hpp"
#include "models/layers/max_pool2d.hpp"
#include "tests/models/cuda_test_util.hpp"
#include "tests/models/grad_check.hpp"
#endif

namespace tandem::models {
namespace {

#if TANDEM_HAVE_CUDA
using namespace cuda_test;  // NOLINT(google-build-using-namespace): test helpers only

constexpr double kTolerance = 1e-5;

Tensor on_gpu(const Tensor& t) {
  Tensor g = Tensor::empty(t.shape(), t.dtype(), Device::cuda(0));
  g.copy_from(t);
  return g;
}

// Forward, B and W (fresh and accumulating), then update_buffers, on both devices.
void expect_layer_matches(const Layer& layer, const Shape& shape, bool training) {
  const std::string who = layer.describe() + (training ? "" : " (eval)");
  const Tensor x = testing::random_tensor(shape, 70, 1.5f);
  const std::vector<Tensor> params = testing::random_params(layer, 71);
  Context cpu_ctx;
  cpu_ctx.training = training;
  ForwardResult want = layer.forward(cpu_ctx, params, x);
  const Tensor dy = testing::random_tensor(want.y.shape(), 72);
  const Tensor want_dx = layer.backward_input(cpu_ctx, params, want.saved, dy);
  std::vector<Tensor> want_grads;
  for (const Tensor& p : params) want_grads.push_back(Tensor::full(p.shape(), 0.25f));
  layer.backward_weight_into(cpu_ctx, want.saved, dy, {want_grads, 0.5f, 1.0f});
  std::vector<Tensor> want_out;
  for (const Tensor& p : params) want_out.push_back(p.clone());
  layer.update_buffers(cpu_kernels(), params, want_grads, want_out);

  Stream stream(Device::cuda(0));
  const CudaKernels kernels(stream, cuda::GemmPrecision::f32);
  Context ctx;
  ctx.training = training;
  ctx.kernels = &kernels;
  std::vector<Tensor> gparams;
  for (const Tensor& p : params) gparams.push_back(on_gpu(p));
  const Tensor gdy = on_gpu(dy);
  ForwardResult got = layer.forward(ctx, gparams, on_gpu(x));
  const Tensor gdx = layer.backward_input(ctx, gparams, got.saved, gdy);
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(on_gpu(Tensor::full(p.shape(), 0.25f)));
  layer.backward_weight_into(ctx, got.saved, gdy, {grads, 0.5f, 1.0f});
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(on_gpu(p));
  layer.update_buffers(kernels, gparams, grads, out);
  EXPECT_LE(rel_error(download(got.y, stream), want.y.to_float_vector()), kTolerance) << who;
  EXPECT_LE(rel_error(download(gdx, stream), want_dx.to_float_vector()), kTolerance) << who;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    EXPECT_LE(rel_error(download(grads[i], stream), want_grads[i].to_float_vector()), kTolerance)
        << who << " gradient slot " << layer.param_specs()[i].name;
    EXPECT_LE(rel_error(download(out[i], stream), want_out[i].to_float_vector()), kTolerance)
        << who << " after update_buffers: " << layer.param_specs()[i].name;
  }
}
#endif  // TANDEM_HAVE_CUDA

TEST(CudaImageLayers, MatchTheCpu) {
  TANDEM_REQUIRE_GPU();
#if TANDEM_HAVE_CUDA
  expect_layer_matches(BatchNorm2d(5), {3, 5, 7, 6}, true);
  expect_layer_matches(BatchNorm2d(5), {3, 5, 7, 6}, false);
  expect_layer_matches(AvgPool2d(3, 2, 1), {2, 3, 9, 8}, true);
  expect_layer_matches(AvgPool2d(2), {2, 3, 8, 8}, true);
  expect_layer_matches(GlobalAvgPool2d(), {2, 6, 5, 7}, true);
  expect_layer_matches(Conv2d(3, 4, 1, 7, 1, 0, 3, cpu::Activation::relu), {2, 3, 9, 10}, true);
  expect_layer_matches(Conv2d(3, 4, 7, 1, 2, 3, 0, cpu::Activation::none), {2, 3, 9, 10}, true);
  expect_layer_matches(MaxPool2d(3, 2, 1), {2, 3, 9, 8}, true);
#endif
}

}  // namespace
}  // namespace tandem::models
