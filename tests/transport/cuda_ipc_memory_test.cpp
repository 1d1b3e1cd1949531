// The CUDA calls of the cuda-ipc data plane between two real processes on cuda:0: the parent
// exports a view inside a larger allocation and an interprocess event recorded after the work
// that fills it; a child process (this test binary again) maps the segment, waits on the event,
// copies device-to-device into its own tensor and checks every byte. Skipped without a GPU.
#include "transport/cuda_ipc_memory.hpp"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/stream.hpp"
#include "runtime/tensor.hpp"

extern char** environ;

namespace tandem::transport {
namespace {

constexpr const char* kChildEnv = "TANDEM_CUDA_IPC_CHILD";
constexpr std::int64_t kRows = 257, kCols = 129;  // odd sizes: no accidental alignment

std::vector<float> pattern(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) * 0.5f - 7.0f;
  return v;
}

int run_child(const std::string& file) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string filter = "--gtest_filter=CudaIpcMemoryChild.*";
  const std::string env = std::string(kChildEnv) + "=" + file;
  std::vector<char*> argv{const_cast<char*>(self.c_str()), const_cast<char*>(filter.c_str()),
                          nullptr};
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(const_cast<char*>(env.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(CudaIpcMemory, TheBuildSaysWhetherItHasTheCalls) {
#if TANDEM_HAVE_CUDA
  EXPECT_TRUE(cuda_ipc_built());
#else
  EXPECT_FALSE(cuda_ipc_built());
  EXPECT_THROW(cuda_ipc_segment_ops(0), CudaIpcRefused);
#endif
}

TEST(CudaIpcMemory, AnotherProcessCopiesAViewByteExact) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const Device gpu = Device::cuda(0);
  // A view at an offset inside a larger allocation: the descriptor must carry the offset.
  Tensor whole = Tensor::zeros({kRows + 3, kCols}, DType::f32, gpu);
  Tensor view = whole.slice(3, 3 + kRows);
  Stream producer(gpu);
  view.copy_from(Tensor::from_vector(pattern(kRows * kCols), {kRows, kCols}), producer);
  const CudaIpcEvent done = CudaIpcEvent::record(producer);
  CudaIpcTensor d = cuda_ipc_export(view);
  EXPECT_EQ(d.offset, std::uint64_t{3 * kCols * 4});
  EXPECT_GE(d.segment_bytes, whole.nbytes());
  d.event = done.handle();
  d.seq = 1;
  const std::vector<std::byte> bytes = encode_cuda_ipc_tensors(std::vector{d});
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("cuda_ipc_" + std::to_string(getpid()));
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  // The child may map the segment before the copy above ran: the event orders it.
  EXPECT_EQ(run_child(file.string()), 0);
  producer.synchronize();
  std::filesystem::remove(file);
}

// The child's half (runs only when the test above starts it).
TEST(CudaIpcMemoryChild, MapsWaitsCopiesAndChecks) {
  const char* file = std::getenv(kChildEnv);
  if (file == nullptr) GTEST_SKIP() << "started by AnotherProcessCopiesAViewByteExact only";
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> raw((std::istreambuf_iterator<char>(in)), {});
  const std::vector<CudaIpcTensor> ds =
      decode_cuda_ipc_tensors(std::span(reinterpret_cast<const std::byte*>(raw.data()), raw.size()),
                              std::uint64_t{1} << 30);
  ASSERT_EQ(ds.size(), 1u);
  const CudaIpcTensor& d = ds[0];
  const Device gpu = Device::cuda(0);
  CudaIpcSegments segments(cuda_ipc_segment_ops(0));
  Stream copies(gpu);
  cuda_ipc_wait(d.event, copies);
  Tensor mine = Tensor::empty(d.shape, d.dtype, gpu);
  cuda_ipc_copy(mine, static_cast<const char*>(segments.base(d.memory)) + d.offset, d.bytes,
                copies);
  copies.synchronize();
  EXPECT_EQ(mine.to_float_vector(), pattern(kRows * kCols));
  EXPECT_EQ(segments.opens(), 1u);
}

}  // namespace
}  // namespace tandem::transport
