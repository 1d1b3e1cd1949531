#pragma once
// The CUDA calls of the `cuda-ipc` data plane, behind plain types so that the rest of it (and
// CPU-only builds) never include CUDA headers. cuda_ipc_memory.cu implements them inside the
// CUDA plugin (runtime/plugin.hpp), which registers its CudaIpcBackend when it loads; the
// functions here forward to it, and without it they throw CudaIpcRefused saying so.
//
// Sender: cuda_ipc_export names a cuda tensor's memory for another process (its segment's
// handle, the segment's size and the tensor's offset in it: cudaIpcGetMemHandle names the
// whole allocation whatever address inside it is asked about, and the caching allocator's
// blocks are whole cudaMalloc allocations, views of them at an offset); CudaIpcEvent is an
// interprocess event recorded on the producing stream. Receiver: the segment ops map and unmap
// a handle's segment (for CudaIpcSegments), cuda_ipc_wait orders a stream after the sender's
// event, and cuda_ipc_copy copies device-to-device on that stream.
#include <memory>
#include <stdexcept>
#include <utility>

#include "runtime/stream.hpp"
#include "runtime/tensor.hpp"
#include "transport/cuda_ipc_descriptor.hpp"
#include "transport/cuda_ipc_segments.hpp"

namespace tandem::transport {

// IPC cannot serve this tensor, event or handle here (the message says which call failed, on
// which device, and CUDA's reason): the caller falls back to staging (cuda_ipc_fallback.hpp).
class CudaIpcRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether the CUDA calls are here (loads the CUDA plugin; false: every function below throws
// CudaIpcRefused).
bool cuda_ipc_built();

// The descriptor of `t` (a defined cuda tensor) without seq and event: dtype, shape, device,
// the segment's handle and size, the tensor's offset.
CudaIpcTensor cuda_ipc_export(const Tensor& t);

// An interprocess event (cudaEventInterprocess | cudaEventDisableTiming) recorded on `stream`
// (a cuda stream): the receiver's copy waits on it. Destroyed with the last handle; the sender
// keeps it until the receiver acknowledged the copy.
class CudaIpcEvent {
 public:
  // The recorded event, as the CUDA plugin keeps it (its subclass owns the cudaEvent_t).
  struct State {
    virtual ~State() = default;
    CudaIpcHandle handle{};
  };
  CudaIpcEvent() = default;
  explicit CudaIpcEvent(std::shared_ptr<State> state) : state_(std::move(state)) {}

  static CudaIpcEvent record(Stream& stream);
  const CudaIpcHandle& handle() const;

 private:
  std::shared_ptr<State> state_;
};

// Work enqueued on `stream` from now on runs after the event `handle` names has completed.
void cuda_ipc_wait(const CudaIpcHandle& handle, Stream& stream);
// Copies `bytes` from `src` (a mapped segment's base plus an offset) into `dst` (a cuda tensor
// of at least that size) on `stream`.
void cuda_ipc_copy(Tensor& dst, const void* src, std::size_t bytes, Stream& stream);
// Map and unmap segments on cuda:`device`. The close waits for that device's work first, so
// that no pending copy reads memory being unmapped (CudaIpcSegments closes rarely).
CudaIpcSegmentOps cuda_ipc_segment_ops(int device);

// The CUDA side of the functions above, registered by the CUDA plugin.
struct CudaIpcBackend {
  CudaIpcTensor (*export_tensor)(const Tensor& t) = nullptr;
  CudaIpcEvent (*record)(Stream& stream) = nullptr;
  void (*wait)(const CudaIpcHandle& handle, Stream& stream) = nullptr;
  void (*copy)(Tensor& dst, const void* src, std::size_t bytes, Stream& stream) = nullptr;
  CudaIpcSegmentOps (*segment_ops)(int device) = nullptr;
};
void register_cuda_ipc_backend(const CudaIpcBackend* backend);
// Defined in the CUDA plugin only (cuda_ipc_memory.cu).
const CudaIpcBackend& cuda_ipc_plugin_backend();

}  // namespace tandem::transport
