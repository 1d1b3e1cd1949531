// Tensor, Device and DType.
#include "runtime/tensor.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "runtime/detail/cpu_allocator.hpp"
#include "tests/runtime/error_of.hpp"

namespace tandem {
namespace {

using test::error_of;

TEST(DType, SizesNamesAndParsing) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  for (DType d : {DType::f32, DType::bf16, DType::i32}) EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  EXPECT_NE(error_of([] { parse_dtype("f16"); }).find("f16"), std::string::npos);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
  EXPECT_EQ(BFloat16::from_float(1.0f + 0x1p-8f).to_float(), 1.0f);
  // (1 + 2^-7) + 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(BFloat16::from_float(1.0f + 0x1p-7f + 0x1p-8f).to_float(), 1.0f + 0x1p-6f);
  // Just above the halfway point rounds up.
  EXPECT_EQ(BFloat16::from_float(1.0f + 0x1p-8f + 0x1p-20f).to_float(), 1.0f + 0x1p-7f);
  EXPECT_EQ(BFloat16::from_float(-2.5f).to_float(), -2.5f);
  EXPECT_TRUE(std::isnan(BFloat16::from_float(std::numeric_limits<float>::quiet_NaN()).to_float()));
  EXPECT_TRUE(std::isinf(BFloat16::from_float(std::numeric_limits<float>::infinity()).to_float()));
}

TEST(Device, ParseAndPrint) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("sim"), Device::sim());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  EXPECT_NE(Device::cuda(1), Device::cuda(2));
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x"}) {
    EXPECT_NE(error_of([&] { Device::parse(bad); }).find(bad), std::string::npos) << bad;
  }
}

TEST(Tensor, ShapeStridesAndAlignment) {
  const Tensor t = Tensor::empty({2, 3, 4});
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_THROW(t.dim(3), std::out_of_range);
  EXPECT_EQ(Tensor::empty({}).numel(), 1);
  EXPECT_FALSE(Tensor().defined());
}

// An empty tensor has no storage; reading it copies nothing (UBSan saw memcpy of a null
// pointer here, from the Gloo tests).
TEST(Tensor, EmptyTensorsReadAsEmpty) {
  const Tensor t = Tensor::empty({0, 3});
  EXPECT_TRUE(t.to_float_vector().empty());
  EXPECT_EQ(t.numel(), 0);
}

TEST(Tensor, LargeBlocksAreReusedAfterFree) {
  const void* first = nullptr;
  {
    const Tensor a = Tensor::empty({1 << 20});  // 4 MiB: cached when freed
    first = a.raw_data();
  }
  EXPECT_GE(detail::cpu_cached_bytes(), std::size_t{4} << 20);
  const Tensor b = Tensor::empty({1 << 20});
  EXPECT_EQ(b.raw_data(), first);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.raw_data()) % 64, 0u);
  detail::cpu_release_cached();
  EXPECT_EQ(detail::cpu_cached_bytes(), 0u);
}

TEST(Tensor, HandlesShareAndClonesCopy) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Tensor b = a;  // a handle
  Tensor c = a.clone();
  b.data<float>()[0] = 9;
  EXPECT_EQ(a.data<float>()[0], 9);
  EXPECT_EQ(c.data<float>()[0], 1);
  EXPECT_TRUE(a.shares_storage(b));
  EXPECT_FALSE(a.shares_storage(c));
  EXPECT_FALSE(a.storage_unique());
  EXPECT_TRUE(c.storage_unique());
}

TEST(Tensor, ReshapeAndSliceAreViews) {
  Tensor a = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor r = a.reshape({-1});
  EXPECT_EQ(r.shape(), (Shape{6}));
  EXPECT_TRUE(r.shares_storage(a));
  Tensor s = a.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.to_float_vector(), (std::vector<float>{2, 3, 4, 5}));
  s.data<float>()[0] = 7;
  EXPECT_EQ(a.data<float>()[2], 7);
  const std::string msg = error_of([&] { a.reshape({4, 2}); });
  EXPECT_NE(msg.find("f32[3, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 2]"), std::string::npos) << msg;
  EXPECT_THROW(a.slice(2, 4), std::out_of_range);
}

TEST(Tensor, ConcatRowsUndoesSlicing) {
  const Tensor a = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {3, 2});
  const Tensor parts[] = {a.slice(0, 1), a.slice(1, 3)};
  EXPECT_EQ(concat_rows(parts).to_float_vector(), a.to_float_vector());
  const Tensor bad[] = {a, Tensor::zeros({1, 3})};
  EXPECT_NE(error_of([&] { concat_rows(bad); }).find("f32[1, 3]"), std::string::npos);
}

TEST(Tensor, DtypeChecksAndConversions) {
  const Tensor f = Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f}, {3});
  const std::string msg = error_of([&] { f.data<std::int32_t>(); });
  EXPECT_NE(msg.find("i32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[3]"), std::string::npos) << msg;
  const Tensor b = f.to(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(b.to(DType::f32).to_float_vector(), f.to_float_vector());  // exact in bf16
  EXPECT_EQ(f.to(DType::i32).to_int_vector(), (std::vector<std::int32_t>{1, -2, 3}));
  EXPECT_TRUE(f.to(DType::f32).shares_storage(f));
  const Tensor inf = Tensor::full({1}, std::numeric_limits<float>::infinity());
  EXPECT_THROW(inf.to(DType::i32), std::domain_error);
  EXPECT_EQ(Tensor::full({2}, 3.0f, DType::i32).to_int_vector(), (std::vector<std::int32_t>{3, 3}));
}

TEST(Tensor, CopyFromChecksShapes) {
  Tensor a = Tensor::zeros({2, 2});
  const Tensor b = Tensor::full({2, 2}, 4.0f);
  a.copy_from(b);
  EXPECT_EQ(a.to_float_vector(), b.to_float_vector());
  const std::string msg = error_of([&] { a.copy_from(Tensor::zeros({4})); });
  EXPECT_NE(msg.find("copy_from"), std::string::npos);
  EXPECT_NE(msg.find("f32[4]"), std::string::npos);
  EXPECT_NE(msg.find("f32[2, 2]"), std::string::npos);
}

TEST(Tensor, SimTensorsHaveShapeButNoData) {
  const Tensor s = Tensor::zeros({8, 16}, DType::bf16, Device::sim());
  EXPECT_TRUE(s.defined());
  EXPECT_EQ(s.nbytes(), 256u);
  EXPECT_EQ(s.allocated_bytes(), 0u);  // a shape, no memory
  EXPECT_EQ(s.describe(), "bf16[8, 16] sim");
  EXPECT_NE(error_of([&] { s.raw_data(); }).find("no data"), std::string::npos);
  EXPECT_THROW(s.data<BFloat16>(), std::invalid_argument);
  const Tensor host = Tensor::zeros({8, 16}, DType::bf16);
  EXPECT_GE(host.allocated_bytes(), host.nbytes());
  EXPECT_EQ(host.slice(0, 2).allocated_bytes(), host.allocated_bytes());  // the shared storage
  EXPECT_EQ(Tensor().allocated_bytes(), 0u);
  EXPECT_EQ(host.to(Device::sim()).device(), Device::sim());
  EXPECT_EQ(host.to(Device::sim()).allocated_bytes(), 0u);
  EXPECT_THROW(s.to(Device::cpu()), std::invalid_argument);
  EXPECT_EQ(s.reshape({128}).shape(), (Shape{128}));
}

TEST(Tensor, CudaTensorsNeedTheBackend) {
  if (cuda_backend_built()) {
    if (cuda_device_count() == 0) {
      const std::string msg = error_of([] { Tensor::empty({2}, DType::f32, Device::cuda(0)); });
      EXPECT_NE(msg.find("0 GPU(s) visible"), std::string::npos) << msg;
      return;
    }
    const Tensor h = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
    const Tensor d = h.to(Device::cuda(0));
    EXPECT_EQ(d.device(), Device::cuda(0));
    EXPECT_THROW(d.data<float>(), std::invalid_argument);  // not host memory
    EXPECT_EQ(d.to_float_vector(), h.to_float_vector());
    EXPECT_EQ(d.clone().to(Device::cpu()).to_float_vector(), h.to_float_vector());
    Tensor z = Tensor::zeros({3}, DType::f32, Device::cuda(0));
    z.copy_from(h);
    EXPECT_EQ(z.to_float_vector(), h.to_float_vector());
  } else {
    const std::string msg = error_of([] { Tensor::empty({2}, DType::f32, Device::cuda(0)); });
    EXPECT_NE(msg.find("CUDA backend not built"), std::string::npos) << msg;
    EXPECT_EQ(cuda_device_count(), 0);
  }
}

}  // namespace
}  // namespace tandem
