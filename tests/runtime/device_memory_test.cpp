// DeviceMemoryStats on the cpu, pinned tensors without a GPU, and the caching allocator's
// policy (reuse, rounding, statistics, out-of-memory retry) over a fake system allocator, so
// the policy the cuda:N allocator uses is tested on machines without a GPU.
#include "runtime/device_memory.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/detail/caching_allocator.hpp"
#include "runtime/detail/cpu_allocator.hpp"
#include "runtime/tensor.hpp"

namespace tandem {
namespace {

TEST(DeviceMemory, CpuStatsCountLiveCachedAndPeak) {
  release_cached_memory(Device::cpu());
  const DeviceMemoryStats before = device_memory_stats(Device::cpu());
  EXPECT_EQ(before.cached_bytes, 0u);
  reset_peak_memory(Device::cpu());

  const Shape shape = {1 << 18};  // 1 MiB of f32: cached on free (>= 256 KiB)
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty(shape);
    first = t.raw_data();
    const DeviceMemoryStats live = device_memory_stats(Device::cpu());
    EXPECT_GE(live.allocated_bytes, before.allocated_bytes + t.nbytes());
    EXPECT_GE(live.peak_bytes, live.allocated_bytes);
    EXPECT_EQ(live.system_allocations, before.system_allocations + 1);
  }
  const DeviceMemoryStats freed = device_memory_stats(Device::cpu());
  EXPECT_EQ(freed.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(freed.cached_bytes, std::size_t{1} << 20);
  EXPECT_GE(freed.peak_bytes, before.allocated_bytes + (std::size_t{1} << 20));

  {
    Tensor again = Tensor::empty(shape);  // the cached block, without a system allocation
    EXPECT_EQ(again.raw_data(), first);
    EXPECT_EQ(device_memory_stats(Device::cpu()).system_allocations, freed.system_allocations);
  }
  EXPECT_GE(release_cached_memory(Device::cpu()), std::size_t{1} << 20);
  EXPECT_EQ(device_memory_stats(Device::cpu()).cached_bytes, 0u);
}

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::uintptr_t huge_page_of(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) & ~(std::uintptr_t{detail::kHugePageBytes} - 1);
}

bool huge_pages_off_by_env() {
  const char* v = std::getenv("TANDEM_CPU_HUGE_PAGES");
  return v != nullptr && std::strcmp(v, "0") == 0;
}

TEST(DeviceMemory, HugePageLayoutWastesAtMostAnEighth) {
  if (huge_pages_off_by_env()) GTEST_SKIP() << "TANDEM_CPU_HUGE_PAGES=0";
  using detail::huge_layout;
  EXPECT_EQ(huge_layout(kMiB).chunk_bytes, 2 * kMiB);
  EXPECT_EQ(huge_layout(kMiB).blocks, 2u);
  EXPECT_EQ(huge_layout(256 << 10).blocks, 8u);
  EXPECT_EQ(huge_layout(2 * kMiB).blocks, 1u);
  EXPECT_EQ(huge_layout(16 * kMiB).chunk_bytes, 16 * kMiB);
  EXPECT_EQ(huge_layout(17 * kMiB).chunk_bytes, 18 * kMiB);  // 1 MiB of 17 wasted: < 1/8
  EXPECT_EQ(huge_layout(768 << 10).chunk_bytes, 0u);         // two fit, 512 KiB of 2 MiB left
  EXPECT_EQ(huge_layout(2 * kMiB + 4096).chunk_bytes, 0u);   // 4 MiB for 2 MiB + 4 KiB
  EXPECT_EQ(huge_layout(128 << 10).chunk_bytes, 0u);         // below the cached blocks
}

TEST(DeviceMemory, CpuBlocksUnderTwoMiBShareACarvedHugePage) {
  if (huge_pages_off_by_env()) GTEST_SKIP() << "TANDEM_CPU_HUGE_PAGES=0";
  release_cached_memory(Device::cpu());
  const DeviceMemoryStats before = device_memory_stats(Device::cpu());
  Tensor a = Tensor::empty({1 << 18});  // 1 MiB
  Tensor b = Tensor::empty({1 << 18});
  // One system allocation: a 2 MiB chunk whose second slot waited in the cache.
  EXPECT_EQ(device_memory_stats(Device::cpu()).system_allocations, before.system_allocations + 1);
  EXPECT_EQ(huge_page_of(a.raw_data()), huge_page_of(b.raw_data()));
  EXPECT_NE(a.raw_data(), b.raw_data());
  a.data<float>()[(1 << 18) - 1] = 1.0f;  // both slots are whole 1 MiB blocks
  b.data<float>()[(1 << 18) - 1] = 2.0f;
  EXPECT_EQ(a.data<float>()[(1 << 18) - 1], 1.0f);

  // The chunk goes back to the system only whole: with `a` alive, b's slot stays cached.
  b = Tensor();
  EXPECT_EQ(release_cached_memory(Device::cpu()), 0u);
  EXPECT_EQ(device_memory_stats(Device::cpu()).cached_bytes, kMiB);
  a = Tensor();
  EXPECT_EQ(release_cached_memory(Device::cpu()), 2 * kMiB);
  EXPECT_EQ(device_memory_stats(Device::cpu()).cached_bytes, 0u);
}

// Where the kernel offers transparent huge pages, a large tensor sits on 2 MiB boundaries in a
// mapping advised for them (the smaps field THPeligible).
TEST(DeviceMemory, LargeCpuBlocksAreAdvisedAsHugePages) {
  if (huge_pages_off_by_env()) GTEST_SKIP() << "TANDEM_CPU_HUGE_PAGES=0";
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(mode, modes);
  if (modes.empty() || modes.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are off here ('" << modes << "')";
  }
  release_cached_memory(Device::cpu());
  const Tensor t = Tensor::empty({1 << 22});  // 16 MiB
  const auto at = reinterpret_cast<std::uintptr_t>(t.raw_data());
  EXPECT_EQ(at % detail::kHugePageBytes, 0u);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  std::string eligible;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= at && at < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) eligible = line;
  }
  if (eligible.empty()) GTEST_SKIP() << "this kernel's smaps has no THPeligible field";
  EXPECT_NE(eligible.find('1'), std::string::npos) << eligible;
}

TEST(DeviceMemory, SimHasNoMemory) {
  const Tensor t = Tensor::empty({1024}, DType::f32, Device::sim());
  const DeviceMemoryStats s = device_memory_stats(Device::sim());
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.peak_bytes, 0u);
  EXPECT_EQ(release_cached_memory(Device::sim()), 0u);
}

TEST(DeviceMemory, PinnedTensorIsAnOrdinaryCpuTensorWithoutAGpu) {
  Tensor t = Tensor::empty_pinned({3});
  EXPECT_EQ(t.device(), Device::cpu());
  if (cuda_device_count() == 0) {
    EXPECT_FALSE(t.is_pinned());
  }
  t.fill(2.0f);
  EXPECT_EQ(t.to_float_vector(), (std::vector<float>{2, 2, 2}));
  EXPECT_FALSE(Tensor::empty({3}).is_pinned());
  EXPECT_FALSE(Tensor().is_pinned());
}

// A system allocator with a fixed capacity, counting its calls.
struct FakeSystem {
  std::size_t capacity = 0;
  std::size_t used = 0;
  int allocations = 0;
  int frees = 0;
  std::vector<std::pair<void*, std::size_t>> blocks;

  detail::CachingAllocator::SystemOps ops() {
    return {[this](std::size_t bytes) -> void* {
              if (used + bytes > capacity) return nullptr;
              void* p = std::malloc(bytes);
              used += bytes;
              ++allocations;
              blocks.emplace_back(p, bytes);
              return p;
            },
            [this](void* p) {
              for (auto it = blocks.begin(); it != blocks.end(); ++it) {
                if (it->first == p) {
                  used -= it->second;
                  blocks.erase(it);
                  break;
                }
              }
              ++frees;
              std::free(p);
            }};
  }
};

TEST(CachingAllocator, RoundsToSizeClasses) {
  using A = detail::CachingAllocator;
  EXPECT_EQ(A::round_size(0), 512u);
  EXPECT_EQ(A::round_size(1), 512u);
  EXPECT_EQ(A::round_size(513), 1024u);
  constexpr std::size_t MiB = std::size_t{1} << 20;
  EXPECT_EQ(A::round_size(MiB), MiB);
  EXPECT_EQ(A::round_size(MiB + 1), MiB + MiB / 8);
  EXPECT_EQ(A::round_size(3 * MiB + 1), 3 * MiB + 2 * MiB / 8);
  for (std::size_t bytes : {std::size_t{7}, MiB - 1, 5 * MiB + 3, 1000 * MiB + 17}) {
    EXPECT_GE(A::round_size(bytes), bytes);
    EXPECT_LE(A::round_size(bytes), bytes + bytes / 8 + 512) << bytes;
  }
}

TEST(CachingAllocator, ReusesAFreedBlockOfTheSameClassAndStream) {
  FakeSystem system{.capacity = std::size_t{1} << 30};
  detail::CachingAllocator alloc("test allocator", system.ops());
  int stream = 0;
  void* p = alloc.allocate(1000, &stream);
  alloc.deallocate(p);
  EXPECT_EQ(alloc.stats().cached_bytes, 1024u);
  void* q = alloc.allocate(1020, &stream);  // another size of the same class (1024)
  EXPECT_EQ(q, p);
  EXPECT_EQ(alloc.stats().cached_bytes, 0u);
  void* r = alloc.allocate(2000, &stream);  // another class: a new block
  EXPECT_NE(r, p);
  EXPECT_EQ(system.allocations, 2);
  EXPECT_EQ(alloc.stats().system_allocations, 2u);
  alloc.deallocate(q);
  alloc.deallocate(r);
}

TEST(CachingAllocator, OtherStreamsDoNotReuseABlock) {
  FakeSystem system{.capacity = std::size_t{1} << 30};
  detail::CachingAllocator alloc("test allocator", system.ops());
  int stream_a = 0;
  int stream_b = 0;
  void* p = alloc.allocate(4096, &stream_a);
  alloc.deallocate(p);
  void* q = alloc.allocate(4096, &stream_b);
  EXPECT_NE(q, p);  // p may still be in use by stream a's queued work
  EXPECT_EQ(system.allocations, 2);
  alloc.deallocate(q);
}

TEST(CachingAllocator, StatsTrackAllocatedCachedAndPeak) {
  FakeSystem system{.capacity = std::size_t{1} << 30};
  detail::CachingAllocator alloc("test allocator", system.ops());
  void* a = alloc.allocate(512);
  void* b = alloc.allocate(1024);
  DeviceMemoryStats s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 1536u);
  EXPECT_EQ(s.peak_bytes, 1536u);
  alloc.deallocate(a);
  s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 1024u);
  EXPECT_EQ(s.cached_bytes, 512u);
  EXPECT_EQ(s.peak_bytes, 1536u);
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak_bytes, 1024u);
  alloc.deallocate(b);
  EXPECT_EQ(alloc.release_cached(), 1536u);
  EXPECT_EQ(alloc.stats().cached_bytes, 0u);
  EXPECT_EQ(system.frees, 2);
  EXPECT_EQ(system.used, 0u);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  FakeSystem system{.capacity = 4096};
  detail::CachingAllocator alloc("test allocator", system.ops());
  void* a = alloc.allocate(2048);
  void* b = alloc.allocate(2048);
  alloc.deallocate(a);
  alloc.deallocate(b);
  EXPECT_EQ(alloc.stats().cached_bytes, 4096u);

  void* big = alloc.allocate(4096);  // fails once, releases the two cached blocks, succeeds
  EXPECT_NE(big, nullptr);
  EXPECT_EQ(system.frees, 2);
  EXPECT_EQ(alloc.stats().cached_bytes, 0u);

  std::string error;
  try {
    alloc.allocate(512);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("test allocator: out of memory allocating 512 bytes"), std::string::npos)
      << error;
  alloc.deallocate(big);
}

}  // namespace
}  // namespace tandem
