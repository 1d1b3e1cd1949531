#pragma once
// Which data plane `cluster.transport` means for a job, given what is known of it before any
// channel exists. "tcp" and "ucx" are what they say. "cuda-ipc" moves device tensors between
// processes of one host through CUDA IPC (cuda_ipc_descriptor.hpp); it needs a build with CUDA.
// "auto" picks cuda-ipc where it serves every message of the job's data plane (every rank on
// one host, every stage on a cuda device, CUDA built) and tcp otherwise: a job with stages on
// the host gains nothing from IPC, and ranks on several hosts cannot use it.
#include <string>
#include <string_view>

namespace tandem::transport {

enum class DataPlane { tcp, ucx, cuda_ipc };

std::string_view data_plane_name(DataPlane plane);  // "tcp", "ucx", "cuda-ipc"

struct DataPlaneFacts {
  bool cuda_built = false;      // this build has the CUDA backend
  bool one_host = false;        // every rank of the job runs on the same host
  bool stages_on_cuda = false;  // every stage of the job computes on a cuda device
};

// Throws std::invalid_argument for a choice other than auto, tcp, ucx and cuda-ipc, and for
// cuda-ipc in a build without CUDA (naming both). An explicit cuda-ipc across hosts is kept:
// the peers IPC cannot reach fall back to host staging (cuda_ipc_fallback.hpp).
DataPlane choose_data_plane(std::string_view choice, const DataPlaneFacts& facts);

}  // namespace tandem::transport
