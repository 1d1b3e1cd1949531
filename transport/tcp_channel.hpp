#pragma once
// The `tcp` data plane: a Channel over TCP with Asio, the fallback where UCX is unavailable.
//
// Each process owns some endpoints (actors of its ActorSystem, bound as with LocalChannel) and
// routes every other endpoint to the peer process that owns it. Between two processes there
// is one connection of `lanes` TCP streams, opened by the higher rank. Frames are
// wire_message.hpp's; they travel on lane 0, and the tensor bytes of large messages are striped
// over all lanes.
//
// Every stream starts with a handshake that proves both ends hold the job's credentials
// (job_proof.hpp, purpose kDataTcp): the connecting side sends a hello (job id, rank, lane,
// lanes, a fresh nonce); the accepting side answers with its own hello; the connecting side
// sends its proof over both nonces; the accepting side checks it, and only then does the stream
// become that rank's lane, and it answers with its proof, which the connecting side checks
// before it sends or accepts anything else. The accepting side thus proves itself only to a
// connection that proved itself first (it is no oracle of proofs for strangers), and a stranger
// that claims a rank takes nothing: until its proof checks, a connection is nobody's, so the
// real rank connects past it. One round trip and a half per stream, once; messages carry no
// proof. At most max_pending_connections unproven connections are held at once (a new one
// drops the oldest), each for hello_timeout at most. What the proof does not do: the streams
// are neither encrypted nor authenticated frame by frame, so whoever can read or inject on the
// path between two ranks can read or hijack a proven stream (docs/transport.md).
//
// send() never blocks on the network: a message to a remote endpoint is encoded (its head; the
// tensors are written from their own memory, kept alive by the queued message), its device
// tensors staged to host memory without waiting (routed_channel.hpp), and queued on the peer's
// connection, and the channel's own thread writes it. Per sender and peer the order
// of sends is the order of delivery. The reader validates every frame (job, type, body size,
// lane, dtype, shape, byte count, that the sender owns `from` and this process `to`), reads the
// tensors' bytes straight into freshly allocated CPU tensors and hands the message to the bound
// actor through the ActorSystem, from outside any actor (source id 0).
//
// Failures are reported asynchronously, on the channel's thread, through on_error: a write or
// read that fails, a peer that closes without a goodbye, a malformed frame (naming the peer and
// the message's type and tag). A failure of a peer's connection stops the ActorSystem (unless
// stop_system_on_error is false), so a run ends instead of waiting for messages that will never
// come; later sends to that peer return target_stopped. A connection that fails before its
// proof checked (a stranger, garbage on the port, a wrong or missing proof, a hello for a rank
// or lane already connected) is closed and reported with peer_rank -1 and its remote address;
// the run goes on. On the connecting side a peer whose proof does not check, or that closes the
// stream after reading this side's proof (it refused it: another token), fails as any peer does.
//
// The ActorSystem must outlive the channel; a message that arrives after the system stopped is
// dropped.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/actor_system.hpp"
#include "transport/job_proof.hpp"
#include "transport/routed_channel.hpp"
#include "transport/wire_message.hpp"

namespace tandem::transport {

struct TcpPeer {
  int rank = 0;  // the peer process, numbered as the rendezvous numbers ranks
  std::string host;
  std::uint16_t port = 0;  // where its TcpChannel listens (TcpChannel::port())
};

// TCP streams per peer unless TcpChannelOptions::lanes says otherwise.
inline constexpr int kDefaultTcpLanes = 2;

struct TcpChannelOptions {
  // What every connection proves it holds (the rendezvous hands them out): both ends must hold
  // the same. Frames carry job_id_of(credentials.job).
  JobCredentials credentials;
  int rank = 0;  // this process
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 0;                            // 0: a free port (port() reports it)
  WireTypes types;                                          // the message types that may travel
  std::uint64_t max_data_bytes = kDefaultMaxWireDataBytes;  // per message, both ways
  // How long connecting to a peer is retried (it may not listen yet), and how long a connection
  // may take over its whole handshake (hellos and proofs), either side.
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds hello_timeout{5000};
  // Accepted connections that have not proved themselves yet, at most: a new one beyond this
  // drops the oldest, so that strangers cannot hold the listener's file descriptors.
  std::size_t max_pending_connections = 16;
  // After close() wrote this process's goodbyes: how long it waits for the peers' goodbyes, so
  // that closing does not reset a connection the peer still reads from.
  std::chrono::milliseconds close_linger{1000};
  // TCP streams per peer, opened by the connecting side (the higher rank; the accepting side
  // takes the number from its hello): a message with 256 KiB or more of tensor bytes is striped
  // over them (wire_stripes.hpp). Over loopback two streams moved 1 MiB tensors faster than one
  // (docs/benchmarks.md's history), as ucx_perftest's rendezvous striped over two interfaces does.
  // 1 to kMaxWireLanes.
  int lanes = kDefaultTcpLanes;
  // Called on the channel's thread for every failure (keep it short; it may stop the system),
  // and for the first 100 strangers (the rest are counted in stats().strangers only).
  std::function<void(const ChannelError&)> on_error;
  bool stop_system_on_error = true;
  // How device tensors reach host memory before they travel; null: the cuda ones, on a copy
  // stream per device (send_staging.hpp).
  std::shared_ptr<SendStaging> staging;
};

class TcpChannel final : public RoutedChannel {
 public:
  // Starts listening (throws std::runtime_error naming the address when it cannot) and the
  // channel's thread.
  TcpChannel(ActorSystem& system, TcpChannelOptions options);
  // close() with its default timeout.
  ~TcpChannel() override;

  std::uint16_t port() const;

  // Before start(), not thread-safe: a peer process (bind and route are RoutedChannel's).
  void add_peer(TcpPeer peer);
  // Opens the connections to the peers of lower rank and accepts those of higher rank. Sends
  // before a connection is up wait in its queue.
  void start();

  // Orderly end: later sends fail; staged messages leave once their copies ran and what is
  // queued is written (each up to `timeout`), then a goodbye to every peer; waits up to
  // close_linger for the peers' goodbyes, then closes everything and joins the channel's
  // thread. Idempotent.
  void close(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  struct Stats : ChannelStats {
    std::uint64_t striped = 0;  // sent with their tensor bytes spread over several lanes
  };
  Stats stats() const;

 private:
  SendResult post(RoutedPeer& peer, std::vector<std::byte> head, Message msg) override;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::transport
