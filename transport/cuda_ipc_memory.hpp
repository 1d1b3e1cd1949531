#pragma once
// The CUDA calls of the `cuda-ipc` data plane, behind plain types so that the rest of it (and
// CPU-only builds) never include CUDA headers. cuda_ipc_memory.cu implements them; a build
// without CUDA links cuda_ipc_memory_absent.cpp, whose functions throw CudaIpcRefused saying so.
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

// Whether this build has the CUDA calls (false: every function below throws CudaIpcRefused).
bool cuda_ipc_built();

// The descriptor of `t` (a defined cuda tensor) without seq and event: dtype, shape, device,
// the segment's handle and size, the tensor's offset.
CudaIpcTensor cuda_ipc_export(const Tensor& t);

// An interprocess event (cudaEventInterprocess | cudaEventDisableTiming) recorded on `stream`
// (a cuda stream): the receiver's copy waits on it. Destroyed with the last handle; the sender
// keeps it until the receiver acknowledged the copy.
class CudaIpcEvent {
 public:
  static CudaIpcEvent record(Stream& stream);
  const CudaIpcHandle& handle() const;

 private:
  struct State;
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

}  // namespace tandem::transport
