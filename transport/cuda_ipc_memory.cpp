// The core's side of cuda_ipc_memory.hpp: forwarders to the CUDA plugin's CudaIpcBackend.
#include "transport/cuda_ipc_memory.hpp"

#include <atomic>
#include <string>

#include "runtime/detail/device_backend.hpp"
#include "runtime/plugin.hpp"

namespace tandem::transport {
namespace {

std::atomic<const CudaIpcBackend*> registered{nullptr};

// The plugin's functions, loading it first; null without it.
const CudaIpcBackend* loaded_backend() {
  if (const CudaIpcBackend* b = registered.load(std::memory_order_acquire)) return b;
  (void)detail::cuda_backend();  // loads the CUDA plugin, which registers its backend
  return registered.load(std::memory_order_acquire);
}

// The same; throws CudaIpcRefused naming `what` without it.
const CudaIpcBackend& backend(const char* what) {
  if (const CudaIpcBackend* b = loaded_backend()) return *b;
  std::string why = plugin_problem("cuda");
  if (why.empty()) why = "the CUDA plugin has no IPC calls";
  throw CudaIpcRefused(std::string(what) + ": this build has no CUDA backend (" + why + ")");
}

}  // namespace

void register_cuda_ipc_backend(const CudaIpcBackend* b) {
  registered.store(b, std::memory_order_release);
}

bool cuda_ipc_built() {
  return loaded_backend() != nullptr;
}

CudaIpcTensor cuda_ipc_export(const Tensor& t) {
  return backend("cuda_ipc_export").export_tensor(t);
}

CudaIpcEvent CudaIpcEvent::record(Stream& stream) {
  return backend("CudaIpcEvent::record").record(stream);
}

const CudaIpcHandle& CudaIpcEvent::handle() const {
  if (!state_) throw std::logic_error("CudaIpcEvent::handle: never recorded");
  return state_->handle;
}

void cuda_ipc_wait(const CudaIpcHandle& handle, Stream& stream) {
  backend("cuda_ipc_wait").wait(handle, stream);
}

void cuda_ipc_copy(Tensor& dst, const void* src, std::size_t bytes, Stream& stream) {
  backend("cuda_ipc_copy").copy(dst, src, bytes, stream);
}

CudaIpcSegmentOps cuda_ipc_segment_ops(int device) {
  return backend("cuda_ipc_segment_ops").segment_ops(device);
}

}  // namespace tandem::transport
