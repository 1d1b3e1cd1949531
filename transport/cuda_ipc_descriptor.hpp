#pragma once
// What the `cuda-ipc` data plane sends in place of a cuda tensor's bytes: where the tensor lies
// in the sender's device memory, named so that another process of the same host can map it
// (cudaIpcGetMemHandle/cudaIpcOpenMemHandle), and the IPC event that completes once the work
// producing it has run. The receiver maps the segment (once: CudaIpcSegments), waits on the
// event on its copy stream, copies the bytes device-to-device into a tensor of its own and
// acknowledges `seq`, until which the sender keeps the tensor alive.
//
// cudaIpcGetMemHandle names a whole cudaMalloc allocation (a segment), whatever address inside
// it is asked about, and cudaIpcOpenMemHandle maps that segment's base: so a descriptor carries
// the segment's handle and size and the tensor's offset in it.
//
// Wire form, integers little-endian, one record per tensor:
//   u8 dtype | u8 rank | u16 device | u32 0 | i64 dims[rank] | u64 seq | u64 segment bytes |
//   u64 offset | u64 bytes | u8 memory handle[64] | u8 event handle[64]
// and a list of them: u8 count | records. Bytes from another process are checked before use:
// a known dtype, rank <= kMaxWireRank, dims >= 0, bytes == numel * dtype size <= the limit, the
// tensor inside its segment (offset + bytes <= segment bytes, no overflow), a memory handle that
// is not all zeros; a failure throws WireError naming the field.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/tensor.hpp"

namespace tandem::transport {

// CUDA_IPC_HANDLE_SIZE, for cudaIpcMemHandle_t and cudaIpcEventHandle_t alike.
inline constexpr std::size_t kCudaIpcHandleBytes = 64;
using CudaIpcHandle = std::array<std::byte, kCudaIpcHandleBytes>;

struct CudaIpcTensor {
  DType dtype = DType::f32;
  Shape shape;
  int device = 0;                   // the sender's cuda index (the receiver copies on its own)
  std::uint64_t seq = 0;            // acknowledged by the receiver once its copy has run
  std::uint64_t segment_bytes = 0;  // the size of the allocation the memory handle names
  std::uint64_t offset = 0;         // of the tensor's first byte from the segment's base
  std::uint64_t bytes = 0;          // numel * dtype size
  CudaIpcHandle memory{};
  CudaIpcHandle event{};

  friend bool operator==(const CudaIpcTensor&, const CudaIpcTensor&) = default;
};

// Throws WireError for a descriptor that would not decode (a rank above kMaxWireRank, a byte
// count that does not match its shape, a tensor outside its segment): the sender's own check.
std::vector<std::byte> encode_cuda_ipc_tensors(std::span<const CudaIpcTensor> tensors);
// At most kMaxWireTensors records, each checked as above with bytes <= max_bytes; nothing may
// follow the last one.
std::vector<CudaIpcTensor> decode_cuda_ipc_tensors(std::span<const std::byte> in,
                                                   std::uint64_t max_bytes);

}  // namespace tandem::transport
