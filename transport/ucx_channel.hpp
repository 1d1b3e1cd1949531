#pragma once
// The `ucx` data plane: a Channel over UCX active messages, the fast path between processes
// (shared memory on one host, TCP or RDMA across hosts), with TcpChannel's semantics.
//
// Each process owns some endpoints (actors of its ActorSystem, bound as with LocalChannel) and
// routes every other endpoint to the peer process that owns it. The channel owns one UCX
// context and worker, driven by the channel's own progress thread only: it progresses until
// idle, then arms the worker and sleeps on the worker's event fd and an eventfd that send()
// rings. A peer is reached through the UCX worker address it published (worker_address(),
// carried by the rendezvous in PeerInfo::blob); each process opens its own endpoint to every
// peer, in error-handling mode "peer", so that a peer that dies is reported, not waited on.
//
// A message is one active message (id kUcxAmId): its header is a 16-byte channel header
//   u32 magic 'TDUX' | u32 sender rank | u64 sequence number
// followed by a wire_message.hpp frame's prefix and meta part (hello, message or goodbye); its
// payload is the tensors' bytes, sent from their own memory (kept alive by the queued message).
// Large payloads (from UcxChannelOptions::rendezvous_min_bytes on) go by UCX's rendezvous
// protocol and are received straight into freshly allocated CPU tensors (no staging copy); small
// ones arrive eagerly and are copied once out of UCX's buffer. The first message to a peer is a
// hello (job id, rank and a fresh nonce), the last one a goodbye. The receiver validates every
// message as TcpChannel does (job, type, lane, dtype, shape, byte count against the payload,
// that the sender owns `from` and this process `to`) and delivers a peer's messages in sequence
// order, whatever order their rendezvous transfers complete in: per sender and peer the order of
// sends is the order of delivery. Delivery goes through the ActorSystem, from outside any actor
// (source id 0).
//
// send() never blocks on the network: a message to a remote endpoint is encoded (its head) and
// queued on the peer; the progress thread posts it to UCX.
//
// Membership (job_proof.hpp, purpose kDataUcx). On a peer's hello, each side sends a proof
// frame over its own data endpoint to that peer, ahead of any message: its proof over its own
// nonce and the hello's. A peer counts as connected (wait_connected) once its proof checks;
// until then nothing is sent to it but the hello and proofs, and whatever arrives in its name
// but hellos and proofs is refused as a stranger's (reported with peer_rank -1, dropped; the
// run goes on). A proof that does not check is reported with the rank it claims and dropped;
// a peer without one that checks within connect_timeout + hello_timeout fails, the report naming
// the last refusal (a wrong token reads "did not check"). Each distinct hello in a peer's name
// is answered (up to 8 before the peer proved itself), so a stranger's hello sent first does
// not shut the peer out: the peer refuses the proof made for the stranger's nonce and takes
// the one made for its own. Hellos and proofs take no sequence number (their channel header
// says 0); messages and the goodbye are numbered from 1.
//
// What UCX's model leaves open. An active message is not bound to a connection: the receiving
// callback learns nothing about which endpoint or worker sent it, and any process that can
// reach this worker (its address, or the ports of the interfaces UCX listens on) can send one
// in any rank's name. The proof therefore admits a rank, not a connection: once rank r proved
// itself, a message that claims r, carries the job id (job_id_of: 8 bytes of the job's nonce,
// travelling in clear in every frame) and the next sequence numbers is taken as r's, and a
// malformed one in r's name fails r as r's own would. What keeps an off-path stranger out after
// the proof is only that it does not know the job id; whoever sees the traffic does, and can
// inject into it or stop the run. Nothing is encrypted. UcxChannelOptions::net_devices narrows
// the interfaces UCX uses (and listens on) to those the job needs.
//
// Failures are reported asynchronously, on the progress thread, through on_error: a send or
// receive that fails, a peer lost (its endpoint's error handler), a peer silent past the hello
// deadline, a malformed message (naming the peer and the message's type and tag). A peer's
// failure stops the ActorSystem (unless stop_system_on_error is false), so a run ends instead
// of waiting for messages that will never come; later sends to that peer return
// target_stopped. A message that cannot be attributed to a peer (no channel header, an unknown
// rank) is reported and dropped; the run goes on.
//
// The ActorSystem must outlive the channel; a message that arrives after the system stopped is
// dropped.
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/actor_system.hpp"
#include "transport/ucx_data_plane.hpp"

namespace tandem::transport {

class UcxChannel final : public UcxDataPlane {
 public:
  // Creates the UCX context and worker (throws std::runtime_error naming the UCX call that
  // failed). The progress thread starts with start().
  UcxChannel(ActorSystem& system, UcxChannelOptions options);
  // close() with its default timeout.
  ~UcxChannel() override;

  // This worker's address: what peers need in UcxPeer::address (publish it through the
  // rendezvous).
  const std::vector<std::byte>& worker_address() const override;

  // Before start(), not thread-safe: a peer process (bind and route are RoutedChannel's).
  void add_peer(UcxPeer peer) override;
  // Starts the progress thread: it opens an endpoint to every peer and says hello. Sends before
  // start() wait in the peer's queue.
  void start() override;

  // Orderly end: later sends fail; staged messages leave once their copies ran and what is
  // queued is sent (each up to `timeout`), then a goodbye to every peer; waits up to
  // close_linger for the peers' goodbyes, then flushes and closes the endpoints, stops the
  // progress thread and destroys the worker. Idempotent.
  void close(std::chrono::milliseconds timeout = std::chrono::seconds(10)) override;

  using Stats = UcxChannelStats;
  Stats stats() const override;

 private:
  SendResult post(RoutedPeer& peer, std::vector<std::byte> head, Message msg) override;
  // The worker's largest active-message header, less the channel's own header.
  std::size_t max_head_bytes() const override;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::transport
