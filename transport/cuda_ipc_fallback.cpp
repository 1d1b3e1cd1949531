#include "transport/cuda_ipc_fallback.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "runtime/log.hpp"

namespace tandem::transport {

CudaIpcFallback::CudaIpcFallback(int rank, std::function<void(const std::string&)> warn)
    : rank_(rank), warn_(std::move(warn)) {
  if (!warn_) warn_ = [](const std::string& line) { tandem::log::warn("{}", line); };
}

void CudaIpcFallback::add_peer(int peer_rank, bool same_host) {
  {
    std::lock_guard lock(mu_);
    routes_[peer_rank] = CudaIpcRoute::ipc;
  }
  if (!same_host) refuse(peer_rank, "it runs on another host");
}

CudaIpcRoute CudaIpcFallback::route(int peer_rank) const {
  std::lock_guard lock(mu_);
  auto it = routes_.find(peer_rank);
  if (it == routes_.end()) {
    throw std::out_of_range(fmt::format("cuda-ipc data plane: no peer of rank {}", peer_rank));
  }
  return it->second;
}

bool CudaIpcFallback::refuse(int peer_rank, const std::string& why) {
  std::string line;
  {
    std::lock_guard lock(mu_);
    auto it = routes_.find(peer_rank);
    if (it == routes_.end()) {
      throw std::out_of_range(fmt::format("cuda-ipc data plane: no peer of rank {}", peer_rank));
    }
    if (it->second == CudaIpcRoute::staging) return false;
    it->second = CudaIpcRoute::staging;
    refusals_.push_back({peer_rank, why});
    line = fmt::format(
        "cuda-ipc data plane (rank {}): CUDA IPC refused for rank {}: {}; its device tensors go "
        "through pinned host memory instead",
        rank_, peer_rank, why);
    if (refusals_.size() > 1) {
      tandem::log::debug("{}", line);
      return true;
    }
  }
  warn_(line + " (further refusals are logged at debug level)");
  return true;
}

std::vector<CudaIpcRefusal> CudaIpcFallback::refusals() const {
  std::lock_guard lock(mu_);
  return refusals_;
}

}  // namespace tandem::transport
