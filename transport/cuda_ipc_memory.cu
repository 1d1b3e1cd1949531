// The CUDA side of cuda_ipc_memory.hpp. No fmt here: nvcc 13 rejects fmt's consteval format
// strings, so messages are concatenated.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "transport/cuda_ipc_memory.hpp"

namespace tandem::transport {
namespace {

void check(cudaError_t status, const char* what, int device) {
  if (status != cudaSuccess) {
    throw CudaIpcRefused("CUDA IPC on cuda:" + std::to_string(device) + ": " + what +
                         " failed: " + cudaGetErrorString(status));
  }
}

// Makes cuda:index current for a scope and restores the caller's device (per-thread state the
// models' kernels rely on).
class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice", index);
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

using AddressRangeFn = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);

// cuMemGetAddressRange through the runtime's entry point: the driver library is not linked, so
// binaries still load on machines without one.
AddressRangeFn address_range_fn(int device) {
  static AddressRangeFn fn = [device] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault,
                                           &found),
          "cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)", device);
    if (found != cudaDriverEntryPointSuccess || p == nullptr) {
      throw CudaIpcRefused("CUDA IPC on cuda:" + std::to_string(device) +
                           ": the driver has no cuMemGetAddressRange");
    }
    return reinterpret_cast<AddressRangeFn>(p);
  }();
  return fn;
}

CudaIpcHandle to_bytes(const void* handle) {
  CudaIpcHandle out{};
  std::memcpy(out.data(), handle, out.size());
  return out;
}

}  // namespace

static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes);
static_assert(sizeof(cudaIpcEventHandle_t) == kCudaIpcHandleBytes);

// The functions of CudaIpcBackend; named apart from the core's forwarders of
// cuda_ipc_memory.hpp, which they would otherwise interpose.
namespace {

CudaIpcTensor export_tensor(const Tensor& t) {
  if (!t.defined() || !t.device().is_cuda()) {
    throw std::invalid_argument(
        "cuda_ipc_export: " + (t.defined() ? t.describe() : std::string("an undefined tensor")) +
        " is not a cuda tensor");
  }
  const int device = t.device().index();
  DeviceScope scope(device);
  CudaIpcTensor d;
  d.dtype = t.dtype();
  d.shape = t.shape();
  d.device = device;
  d.bytes = t.nbytes();
  const auto* ptr = static_cast<const char*>(t.raw_data());
  CUdeviceptr base = 0;
  std::size_t size = 0;
  const CUresult range = address_range_fn(device)(&base, &size, reinterpret_cast<CUdeviceptr>(ptr));
  if (range != CUDA_SUCCESS) {
    throw CudaIpcRefused("CUDA IPC on cuda:" + std::to_string(device) +
                         ": cuMemGetAddressRange failed with CUresult " + std::to_string(range));
  }
  cudaIpcMemHandle_t handle{};
  check(cudaIpcGetMemHandle(&handle, const_cast<char*>(ptr)), "cudaIpcGetMemHandle", device);
  d.memory = to_bytes(&handle);
  d.segment_bytes = size;
  d.offset = static_cast<std::uint64_t>(reinterpret_cast<CUdeviceptr>(ptr) - base);
  return d;
}

struct EventState final : CudaIpcEvent::State {
  int device = 0;
  cudaEvent_t event = nullptr;
  ~EventState() override {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

CudaIpcEvent record(Stream& stream) {
  if (!stream.device().is_cuda()) {
    throw std::invalid_argument("CudaIpcEvent::record: not a cuda stream");
  }
  const int device = stream.device().index();
  DeviceScope scope(device);
  auto state = std::make_shared<EventState>();
  state->device = device;
  check(cudaEventCreateWithFlags(&state->event, cudaEventInterprocess | cudaEventDisableTiming),
        "cudaEventCreateWithFlags(interprocess)", device);
  check(cudaEventRecord(state->event, static_cast<cudaStream_t>(stream.native_handle())),
        "cudaEventRecord", device);
  cudaIpcEventHandle_t h{};
  check(cudaIpcGetEventHandle(&h, state->event), "cudaIpcGetEventHandle", device);
  state->handle = to_bytes(&h);
  return CudaIpcEvent(std::move(state));
}

void wait(const CudaIpcHandle& handle, Stream& stream) {
  const int device = stream.device().index();
  DeviceScope scope(device);
  cudaIpcEventHandle_t h{};
  std::memcpy(&h, handle.data(), sizeof(h));
  cudaEvent_t event = nullptr;
  check(cudaIpcOpenEventHandle(&event, h), "cudaIpcOpenEventHandle", device);
  const cudaError_t waited =
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.native_handle()), event, 0);
  // The wait is enqueued: the event may go now.
  cudaEventDestroy(event);
  check(waited, "cudaStreamWaitEvent", device);
}

void copy(Tensor& dst, const void* src, std::size_t bytes, Stream& stream) {
  if (!dst.defined() || !dst.device().is_cuda() || dst.nbytes() < bytes) {
    throw std::invalid_argument("cuda_ipc_copy: the destination is not a cuda tensor of " +
                                std::to_string(bytes) + " bytes");
  }
  const int device = dst.device().index();
  DeviceScope scope(device);
  check(cudaMemcpyAsync(dst.raw_data(), src, bytes, cudaMemcpyDeviceToDevice,
                        static_cast<cudaStream_t>(stream.native_handle())),
        "cudaMemcpyAsync (device to device)", device);
}

CudaIpcSegmentOps segment_ops(int device) {
  CudaIpcSegmentOps ops;
  ops.open = [device](const CudaIpcHandle& handle) {
    DeviceScope scope(device);
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, handle.data(), sizeof(h));
    void* base = nullptr;
    check(cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle",
          device);
    return base;
  };
  ops.close = [device](void* base) {
    try {
      DeviceScope scope(device);
      cudaDeviceSynchronize();
      cudaIpcCloseMemHandle(base);
    } catch (...) {
      // Closing is best effort: the mapping goes with the process.
    }
  };
  return ops;
}

}  // namespace

const CudaIpcBackend& cuda_ipc_plugin_backend() {
  static const CudaIpcBackend backend{&export_tensor, &record, &wait, &copy, &segment_ops};
  return backend;
}

}  // namespace tandem::transport
