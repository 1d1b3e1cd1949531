#pragma once
// The `cuda-ipc` data plane: a Channel between processes of one host whose stages run on GPUs,
// in which a cuda tensor travels as a descriptor of its device memory (cuda_ipc_descriptor.hpp)
// instead of its bytes, so it never passes through host memory.
//
// The connection is tcp_channel.hpp's, on one stream per peer (no lanes): the higher rank
// connects, and the same hellos and proofs (job_proof.hpp, purpose kDataCudaIpc) prove both
// ends before anything else is read; strangers are refused and counted as there. Frames are
// wire_message.hpp's plus cuda_ipc_frame.hpp's: a message whose cuda tensors go by IPC is a
// tensors frame (their descriptors and slots) followed by its message frame, whose data part
// carries only its host tensors' bytes.
//
// Whether IPC serves a peer is probed once its connection is up: each side exports a small
// allocation of cuda:`device` and the other answers whether it could map it. Until the answer,
// and for good after a refusal (this side cannot export, the peer cannot map, another host,
// a build without CUDA), messages to that peer have their cuda tensors staged to host memory
// by the skeleton (routed_channel.hpp) and travel as with tcp; the first refusal of the channel
// is logged once as a warning (cuda_ipc_fallback.hpp), all are in refusals().
//
// Sender: each cuda tensor of a message to an IPC peer is exported (its segment's handle and
// offset) and an interprocess event is recorded after it on a stream of its device (like
// staging, this orders after the work the sender enqueued before send() only through that
// work having completed, as the executors' sends do); the message is held (CudaIpcOutstanding)
// until the receiver acknowledges its seq. An export refused mid-run fails the peer (its
// message cannot leave and the peer would miss it). Receiver: maps the segment once
// (CudaIpcSegments), waits on the event and copies device-to-device into a fresh tensor of
// cuda:`device` on its copy stream; once that copy's event completes the message is delivered
// (after every message before it from that peer: order per peer is kept) and its seq
// acknowledged. An acknowledgement of a seq not held fails the peer.
//
// Failures, close() and the ActorSystem's lifetime are as TcpChannel's. close() also waits
// (within its timeout) for the copies this side runs and for the acknowledgements of what it
// sent, so that no peer reads memory that was freed.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/actor_system.hpp"
#include "transport/cuda_ipc_fallback.hpp"
#include "transport/job_proof.hpp"
#include "transport/routed_channel.hpp"
#include "transport/wire_message.hpp"

namespace tandem::transport {

struct CudaIpcPeer {
  int rank = 0;
  std::string host;  // where its CudaIpcChannel listens; loopback or listen_host: this host
  std::uint16_t port = 0;
};

struct CudaIpcChannelOptions {
  JobCredentials credentials;  // as TcpChannelOptions'
  int rank = 0;
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 0;  // 0: a free port (port() reports it)
  WireTypes types;
  std::uint64_t max_data_bytes = kDefaultMaxWireDataBytes;
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds hello_timeout{5000};
  std::size_t max_pending_connections = 16;
  std::chrono::milliseconds close_linger{1000};
  // The cuda device this process's probe is made on and received tensors are copied to.
  int device = 0;
  std::function<void(const ChannelError&)> on_error;
  bool stop_system_on_error = true;
  std::shared_ptr<SendStaging> staging;  // for the peers IPC does not serve
  // The one warning of a fallback to staging (default: the library's log, runtime/log.hpp).
  std::function<void(const std::string&)> warn;
};

class CudaIpcChannel final : public RoutedChannel {
 public:
  // Starts listening (throws std::runtime_error naming the address when it cannot) and the
  // channel's thread.
  CudaIpcChannel(ActorSystem& system, CudaIpcChannelOptions options);
  ~CudaIpcChannel() override;

  std::uint16_t port() const;
  // Before start(), not thread-safe.
  void add_peer(CudaIpcPeer peer);
  void start();
  // As TcpChannel::close, waiting also for pending copies and acknowledgements. Idempotent.
  void close(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  struct Stats : ChannelStats {
    std::uint64_t ipc_tensors_sent = 0;  // cuda tensors sent as descriptors
    std::uint64_t ipc_tensors_received = 0;
    std::uint64_t acks_received = 0;
  };
  Stats stats() const;
  // The peers IPC does not serve, and why.
  std::vector<CudaIpcRefusal> refusals() const;
  // Whether cuda tensors to `peer_rank` go by IPC now (its probe was answered and nothing
  // refused it). Throws std::out_of_range for a rank that is no peer.
  bool serves_ipc(int peer_rank) const;

 private:
  SendResult post(RoutedPeer& peer, std::vector<std::byte> head, Message msg) override;
  bool stages_for(const RoutedPeer& peer) const override;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::transport
