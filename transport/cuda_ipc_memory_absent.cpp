// Linked instead of cuda_ipc_memory.cu when the CUDA backend is not built.
#include "transport/cuda_ipc_memory.hpp"

namespace tandem::transport {
namespace {

[[noreturn]] void absent(const char* what) {
  throw CudaIpcRefused(std::string(what) + ": this build has no CUDA backend");
}

}  // namespace

struct CudaIpcEvent::State {};

bool cuda_ipc_built() {
  return false;
}

CudaIpcTensor cuda_ipc_export(const Tensor&) {
  absent("cuda_ipc_export");
}

CudaIpcEvent CudaIpcEvent::record(Stream&) {
  absent("CudaIpcEvent::record");
}

const CudaIpcHandle& CudaIpcEvent::handle() const {
  absent("CudaIpcEvent::handle");
}

void cuda_ipc_wait(const CudaIpcHandle&, Stream&) {
  absent("cuda_ipc_wait");
}

void cuda_ipc_copy(Tensor&, const void*, std::size_t, Stream&) {
  absent("cuda_ipc_copy");
}

CudaIpcSegmentOps cuda_ipc_segment_ops(int) {
  absent("cuda_ipc_segment_ops");
}

}  // namespace tandem::transport
