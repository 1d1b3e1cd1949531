#pragma once
// Which peers of a `cuda-ipc` data plane get device tensors through IPC and which through host
// staging (send_staging.hpp), and saying so once. A peer starts on IPC when it runs on this
// host; IPC may still be refused for it later: cudaIpcGetMemHandle fails on this side (memory
// IPC cannot name, a device without IPC support), or the peer reports that opening a handle or
// an event failed (another container, a device it cannot map). From its first refusal on, that
// peer is served by staging for the rest of the channel's life: a refusal does not heal, and
// flipping back and forth would reorder nothing but cost a failed call per message.
//
// The first refusal of the channel is logged as a warning naming the peer and why; later ones
// (other peers) are recorded in refusals() and logged at debug level only, so a job of many
// ranks on a host without IPC says it once, not once per pair.
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tandem::transport {

enum class CudaIpcRoute { ipc, staging };

struct CudaIpcRefusal {
  int peer_rank = -1;
  std::string why;
};

class CudaIpcFallback {
 public:
  // `warn` receives the one warning (default: the library's log, runtime/log.hpp); `rank` names
  // this process in it.
  explicit CudaIpcFallback(int rank, std::function<void(const std::string&)> warn = {});

  // Before the channel starts: a peer, on this host or not (another host: staging from the
  // start, counted as a refusal).
  void add_peer(int peer_rank, bool same_host);
  // Thread-safe. Throws std::out_of_range for a peer never added.
  CudaIpcRoute route(int peer_rank) const;
  // IPC failed for `peer_rank`: it goes to staging. Returns true the first time for that peer.
  bool refuse(int peer_rank, const std::string& why);
  std::vector<CudaIpcRefusal> refusals() const;

 private:
  int rank_;
  std::function<void(const std::string&)> warn_;
  mutable std::mutex mu_;
  std::unordered_map<int, CudaIpcRoute> routes_;
  std::vector<CudaIpcRefusal> refusals_;
};

}  // namespace tandem::transport
