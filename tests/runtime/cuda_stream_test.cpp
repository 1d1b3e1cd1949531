// Stream, Event, the caching allocator and pinned memory on cuda:0. Built in every
// configuration (it uses the runtime's interface only) and skipped without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/device_memory.hpp"
#include "runtime/event.hpp"
#include "runtime/stream.hpp"
#include "runtime/tensor.hpp"
#include "tests/runtime/error_of.hpp"
#include "tests/runtime/require_gpu.hpp"

namespace tandem {
namespace {

using test::error_of;

const Device kGpu = Device::cuda(0);

// A pinned host tensor holding 0, 1, 2, ... (exact in f32 below 2^24).
Tensor iota_pinned(std::int64_t n) {
  Tensor t = Tensor::empty_pinned({n});
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % (1 << 20));
  return t;
}

bool is_iota(const Tensor& t) {
  const float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (p[i] != static_cast<float>(i % (1 << 20))) return false;
  }
  return true;
}

bool is_zero(const Tensor& t) {
  const float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (p[i] != 0.0f) return false;
  }
  return true;
}

TEST(CudaAllocator, SecondAllocationOfASizeReusesTheFreedBlock) {
  TANDEM_REQUIRE_GPU();
  release_cached_memory(kGpu);
  reset_peak_memory(kGpu);
  const DeviceMemoryStats before = device_memory_stats(kGpu);
  const Shape shape = {1 << 20};  // 4 MiB
  const void* first = nullptr;
  {
    const Tensor a = Tensor::empty(shape, DType::f32, kGpu);
    first = a.raw_data();
    EXPECT_GE(device_memory_stats(kGpu).allocated_bytes, before.allocated_bytes + a.nbytes());
  }
  const DeviceMemoryStats freed = device_memory_stats(kGpu);
  EXPECT_EQ(freed.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(freed.cached_bytes, std::size_t{4} << 20);
  EXPECT_EQ(freed.system_allocations, before.system_allocations + 1);
  {
    const Tensor b = Tensor::empty(shape, DType::f32, kGpu);
    EXPECT_EQ(b.raw_data(), first);
    const DeviceMemoryStats reused = device_memory_stats(kGpu);
    EXPECT_EQ(reused.system_allocations, freed.system_allocations);  // no cudaMalloc
    const Tensor c = Tensor::empty(shape, DType::f32, kGpu);         // both live: a new block
    EXPECT_GE(device_memory_stats(kGpu).peak_bytes,
              before.allocated_bytes + 2 * (std::size_t{4} << 20));
  }
  EXPECT_GE(release_cached_memory(kGpu), std::size_t{8} << 20);
  EXPECT_EQ(device_memory_stats(kGpu).cached_bytes, 0u);
}

TEST(CudaStream, RunsCopiesAndMemsetsInOrder) {
  TANDEM_REQUIRE_GPU();
  Stream stream(kGpu);
  EXPECT_EQ(stream.device(), kGpu);
  EXPECT_NE(stream.native_handle(), nullptr);
  const std::int64_t n = 1 << 22;
  const Tensor src = iota_pinned(n);
  Tensor device = Tensor::empty({n}, DType::f32, kGpu);
  Tensor back = Tensor::empty_pinned({n});
  EXPECT_TRUE(back.is_pinned());

  device.copy_from(src, stream);  // then zero, then read back: zeros
  device.set_zero(stream);
  back.copy_from(device, stream);
  stream.synchronize();
  EXPECT_TRUE(is_zero(back));

  device.set_zero(stream);  // then copy, then read back: the values
  device.copy_from(src, stream);
  back.copy_from(device, stream);
  const Event done = stream.record();
  done.synchronize();
  EXPECT_TRUE(done.query());
  EXPECT_EQ(done.error(), nullptr);
  EXPECT_EQ(done.device(), kGpu);
  EXPECT_TRUE(is_iota(back));
}

TEST(CudaStream, WaitOrdersTwoStreams) {
  TANDEM_REQUIRE_GPU();
  Stream producer(kGpu);
  Stream consumer(kGpu);
  const std::int64_t n = 1 << 24;  // 64 MiB: long enough that an unordered read would see it
  const Tensor src = iota_pinned(n);
  Tensor device = Tensor::zeros({n}, DType::f32, kGpu);
  Tensor back = Tensor::empty_pinned({n});
  device.copy_from(src, producer);
  consumer.wait(producer.record());
  back.copy_from(device, consumer);
  consumer.synchronize();
  EXPECT_TRUE(is_iota(back));
}

TEST(CudaStream, OnCompleteFiresOnAnotherThread) {
  TANDEM_REQUIRE_GPU();
  Stream stream(kGpu);
  const Tensor src = iota_pinned(1 << 20);
  Tensor device = Tensor::empty({1 << 20}, DType::f32, kGpu);
  device.copy_from(src, stream);
  const Event event = stream.record();
  std::promise<std::thread::id> fired;
  event.on_complete([&] { fired.set_value(std::this_thread::get_id()); });
  EXPECT_NE(fired.get_future().get(), std::this_thread::get_id());
  EXPECT_TRUE(event.query());

  std::promise<void> late;  // registered after completion
  event.on_complete([&] { late.set_value(); });
  late.get_future().get();
}

TEST(CudaStream, CpuStreamWaitsOnACudaEvent) {
  TANDEM_REQUIRE_GPU();
  Stream gpu(kGpu);
  Stream cpu(Device::cpu());
  const std::int64_t n = 1 << 22;
  const Tensor src = iota_pinned(n);
  Tensor device = Tensor::empty({n}, DType::f32, kGpu);
  Tensor back = Tensor::empty_pinned({n});
  device.copy_from(src, gpu);
  back.copy_from(device, gpu);
  cpu.wait(gpu.record());
  bool matched = false;
  cpu.enqueue([&] { matched = is_iota(back); });
  cpu.synchronize();
  EXPECT_TRUE(matched);
}

TEST(CudaStream, DestructionDrains) {
  TANDEM_REQUIRE_GPU();
  const std::int64_t n = 1 << 22;
  Tensor back = Tensor::empty_pinned({n});
  Event done;
  {
    Stream stream(kGpu);
    Tensor device = Tensor::empty({n}, DType::f32, kGpu);
    device.copy_from(iota_pinned(n), stream);
    back.copy_from(device, stream);
    done = stream.record();
  }
  EXPECT_TRUE(done.query());
  EXPECT_TRUE(is_iota(back));
}

TEST(CudaStream, RefusesHostWorkAndPendingCpuEvents) {
  TANDEM_REQUIRE_GPU();
  Stream gpu(kGpu);
  EXPECT_NE(error_of([&] { gpu.enqueue([] {}); }).find("cuda:0"), std::string::npos);

  Stream cpu(Device::cpu());
  std::promise<void> gate;
  cpu.enqueue([f = gate.get_future().share()] { f.wait(); });
  const Event pending = cpu.record();
  EXPECT_NE(error_of([&] { gpu.wait(pending); }).find("pending cpu event"), std::string::npos);
  gate.set_value();
  pending.synchronize();
  gpu.wait(pending);  // completed: nothing to wait for
  gpu.synchronize();
}

TEST(CudaStream, PinnedTensorsRoundTripThroughTheDevice) {
  TANDEM_REQUIRE_GPU();
  const Tensor src = iota_pinned(1000);
  EXPECT_TRUE(src.is_pinned());
  EXPECT_EQ(src.device(), Device::cpu());
  const Tensor device = src.to(kGpu);  // the synchronous path reads pinned memory too
  Tensor back = Tensor::empty_pinned({1000});
  Stream stream(kGpu);
  back.copy_from(device, stream);
  stream.synchronize();
  EXPECT_TRUE(is_iota(back));
}

// Timed events place device work on the host's clock: a large clear takes device time, lies
// between the host's times around it, and untimed events keep no time.
TEST(CudaStream, TimedEventsMeasureDeviceTime) {
  TANDEM_REQUIRE_GPU();
  Stream stream(kGpu);
  Tensor big = Tensor::empty({std::int64_t{1} << 26}, DType::f32, kGpu);  // 256 MiB
  const auto before = std::chrono::steady_clock::now();
  const Event start = stream.record_timed();
  for (int i = 0; i < 8; ++i) big.set_zero(stream);
  const Event end = stream.record_timed();
  const Event untimed = stream.record();
  untimed.synchronize();
  const auto after = std::chrono::steady_clock::now();
  ASSERT_TRUE(start.completed_at().has_value());
  ASSERT_TRUE(end.completed_at().has_value());
  const std::optional<std::chrono::nanoseconds> took = end.elapsed_since(start);
  ASSERT_TRUE(took.has_value());
  EXPECT_GT(took->count(), 0) << "2 GiB written";
  // The anchor is read on the host just after the device passed it: allow that much skew.
  const auto slack = std::chrono::milliseconds(1);
  EXPECT_LE(before - slack, *start.completed_at());
  EXPECT_LE(*start.completed_at(), *end.completed_at());
  EXPECT_LE(*end.completed_at(), after + slack);
  EXPECT_FALSE(untimed.completed_at().has_value());
  EXPECT_FALSE(untimed.elapsed_since(start).has_value());
  Stream cpu(Device::cpu());
  const Event on_cpu = cpu.record_timed();
  on_cpu.synchronize();
  EXPECT_FALSE(end.elapsed_since(on_cpu).has_value()) << "different devices";
}

}  // namespace
}  // namespace tandem
