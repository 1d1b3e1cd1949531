// The receiver's cache of mapped segments, on fake open and close calls: each handle opened
// once, the least recently used closed past the capacity, failures not cached, all closed at
// the end.
#include "transport/cuda_ipc_segments.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

namespace tandem::transport {
namespace {

CudaIpcHandle handle(int n) {
  CudaIpcHandle h{};
  h[0] = static_cast<std::byte>(n);
  h[63] = std::byte{1};
  return h;
}

// Opens handle n at address 0x1000 * (n + 1); records every open and close.
struct FakeDevice {
  std::vector<int> opened;
  std::vector<void*> closed;
  bool refuse = false;

  CudaIpcSegmentOps ops() {
    return {[this](const CudaIpcHandle& h) -> void* {
              if (refuse) throw std::runtime_error("cudaIpcOpenMemHandle failed");
              const int n = std::to_integer<int>(h[0]);
              opened.push_back(n);
              return address(n);
            },
            [this](void* base) { closed.push_back(base); }};
  }
  static void* address(int n) { return reinterpret_cast<void*>(std::uintptr_t(0x1000) * (n + 1)); }
};

TEST(CudaIpcSegments, OpensEachHandleOnce) {
  FakeDevice dev;
  CudaIpcSegments segments(dev.ops());
  EXPECT_EQ(segments.base(handle(1)), FakeDevice::address(1));
  EXPECT_EQ(segments.base(handle(2)), FakeDevice::address(2));
  EXPECT_EQ(segments.base(handle(1)), FakeDevice::address(1));
  EXPECT_EQ(dev.opened, (std::vector<int>{1, 2}));
  EXPECT_EQ(segments.open_count(), 2u);
  EXPECT_EQ(segments.opens(), 2u);
}

TEST(CudaIpcSegments, ClosesTheLeastRecentlyUsedPastItsCapacity) {
  FakeDevice dev;
  CudaIpcSegments segments(dev.ops(), 2);
  segments.base(handle(1));
  segments.base(handle(2));
  segments.base(handle(1));  // 2 is now the least recently used
  segments.base(handle(3));
  EXPECT_EQ(dev.closed, (std::vector<void*>{FakeDevice::address(2)}));
  EXPECT_EQ(segments.open_count(), 2u);
  segments.base(handle(2));  // opened again
  EXPECT_EQ(dev.opened, (std::vector<int>{1, 2, 3, 2}));
}

TEST(CudaIpcSegments, AFailedOpenIsNotCached) {
  FakeDevice dev;
  CudaIpcSegments segments(dev.ops());
  segments.base(handle(1));
  dev.refuse = true;
  EXPECT_THROW(segments.base(handle(2)), std::runtime_error);
  EXPECT_EQ(segments.open_count(), 1u);
  dev.refuse = false;
  EXPECT_EQ(segments.base(handle(2)), FakeDevice::address(2));
  EXPECT_EQ(segments.opens(), 2u);
}

TEST(CudaIpcSegments, ForgetClosesOneAndTheCacheClosesTheRest) {
  FakeDevice dev;
  {
    CudaIpcSegments segments(dev.ops());
    segments.base(handle(1));
    segments.base(handle(2));
    segments.forget(handle(1));
    segments.forget(handle(9));  // never opened: nothing
    EXPECT_EQ(dev.closed, (std::vector<void*>{FakeDevice::address(1)}));
  }
  EXPECT_EQ(dev.closed, (std::vector<void*>{FakeDevice::address(1), FakeDevice::address(2)}));
}

TEST(CudaIpcSegments, RefusesMissingOpsAndNoCapacity) {
  FakeDevice dev;
  EXPECT_THROW(CudaIpcSegments(CudaIpcSegmentOps{}), std::invalid_argument);
  EXPECT_THROW(CudaIpcSegments(dev.ops(), 0), std::invalid_argument);
}

}  // namespace
}  // namespace tandem::transport
