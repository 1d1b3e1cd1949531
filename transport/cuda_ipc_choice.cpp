#include "transport/cuda_ipc_choice.hpp"

#include <stdexcept>

namespace tandem::transport {

std::string_view data_plane_name(DataPlane plane) {
  switch (plane) {
    case DataPlane::tcp:
      return "tcp";
    case DataPlane::ucx:
      return "ucx";
    case DataPlane::cuda_ipc:
      return "cuda-ipc";
  }
  return "?";
}

DataPlane choose_data_plane(std::string_view choice, const DataPlaneFacts& facts) {
  if (choice == "tcp") return DataPlane::tcp;
  if (choice == "ucx") return DataPlane::ucx;
  if (choice == "cuda-ipc") {
    if (!facts.cuda_built) {
      throw std::invalid_argument(
          "cluster.transport 'cuda-ipc': this build has no CUDA backend (use tcp or ucx)");
    }
    return DataPlane::cuda_ipc;
  }
  if (choice == "auto") {
    return facts.cuda_built && facts.one_host && facts.stages_on_cuda ? DataPlane::cuda_ipc
                                                                      : DataPlane::tcp;
  }
  throw std::invalid_argument("cluster.transport: unknown data plane '" + std::string(choice) +
                              "' (expected auto, tcp, ucx or cuda-ipc)");
}

}  // namespace tandem::transport
