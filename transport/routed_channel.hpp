#pragma once
// What every channel between processes has in common, whatever moves its bytes: endpoints of
// this process bound to actors and every other endpoint routed to the peer process that owns
// it; the peer table and each peer's state (connected, failed, said goodbye); the failures and
// refusals recorded and reported; the statistics; and the staging of device tensors.
//
// A back end (tcp_channel, ucx_channel) adds how a peer is reached and proves itself and how a
// frame's bytes move: it derives its peer from RoutedPeer, registers it with add_routed_peer,
// and implements post(), which queues an encoded frame for its peer and never blocks.
//
// send() delivers to a local actor directly; a message for another process has its head
// encoded (and so checked) on the caller's thread, then its device tensors staged (SendStaging):
// each copied on a communication stream into a pinned host tensor. A message whose copies are
// pending waits in its peer's staging queue, and so does every later message to that peer, so
// that the order of sends is the order on the wire; when a copy's event completes (on the
// runtime's progress thread) the messages at the queue's head whose copies have all run are
// posted. The sender's worker thus never waits on a device. A copy that failed fails its peer
// (reported as any peer failure). close() first lets the staged messages leave (stop_sending),
// then the back end says goodbye behind them.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/actor_system.hpp"
#include "transport/channel.hpp"
#include "transport/channel_error.hpp"
#include "transport/job_proof.hpp"
#include "transport/send_staging.hpp"
#include "transport/wire_message.hpp"

namespace tandem::transport {

// A message waiting in its peer's staging queue for the copies of its device tensors.
struct StagedMessage {
  std::uint64_t seq = 0;
  std::vector<std::byte> head;  // encoded on the sender's thread
  Message msg;                  // its tensors are the host copies being filled
  std::size_t copies_pending = 0;
  std::string failed;  // a copy's error, once one reported it
};

// One peer process. A back end's peer derives from it and adds its connection's state.
struct RoutedPeer {
  RoutedPeer(int peer_rank, std::string peer_name) : rank(peer_rank), name(std::move(peer_name)) {}
  virtual ~RoutedPeer() = default;
  RoutedPeer(const RoutedPeer&) = delete;
  RoutedPeer& operator=(const RoutedPeer&) = delete;

  const int rank;
  const std::string name;  // "rank 1 (127.0.0.1:40312)": in every error about it

  // Shared by senders, close(), wait_connected() and the back end's thread.
  std::mutex mu;
  bool connected = false;     // proved itself; messages flow
  bool failed = false;        // over: later sends to it return target_stopped
  bool said_goodbye = false;  // it ended in order: it reads no more
  bool ended = false;         // nothing more will come from it

  // The staging queue (RoutedChannel's, under staging_mu; taken before mu, never after).
  std::mutex staging_mu;
  std::deque<StagedMessage> staged;
  std::uint64_t next_staged = 0;
};

// The counters every channel between processes keeps; a back end's Stats adds its own.
struct ChannelStats {
  std::uint64_t messages_sent = 0;  // handed to the network and completed
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_sent = 0;  // frames, heads included
  std::uint64_t bytes_received = 0;
  std::uint64_t delivered = 0;  // handed to a bound actor
  std::uint64_t dropped = 0;    // received for a stopped actor or system
  std::uint64_t strangers = 0;  // refused without failing a peer (unproven, or a bad proof)
  std::uint64_t staged = 0;     // sent after their device tensors were copied to the host
};

// What the skeleton needs of a back end's options.
struct RoutedChannelOptions {
  std::string channel;    // "TcpChannel": in errors about the caller's misuse
  std::string transport;  // "tcp": the log's "tcp data plane (rank 0)"
  int rank = 0;
  std::uint64_t job_id = 0;  // in every frame
  WireTypes types;
  std::uint64_t max_data_bytes = kDefaultMaxWireDataBytes;
  std::function<void(const ChannelError&)> on_error;
  bool stop_system_on_error = true;
  std::shared_ptr<SendStaging> staging;  // null: cuda tensors, a copy stream per device
};

// The skeleton's part of a back end's options (TcpChannelOptions, UcxChannelOptions: their
// fields are named alike).
template <class BackEndOptions>
RoutedChannelOptions skeleton_options(const BackEndOptions& o, std::string channel,
                                      std::string transport) {
  RoutedChannelOptions r;
  r.channel = std::move(channel);
  r.transport = std::move(transport);
  r.rank = o.rank;
  r.job_id = job_id_of(o.credentials.job);
  r.types = o.types;
  r.max_data_bytes = o.max_data_bytes;
  r.on_error = o.on_error;
  r.stop_system_on_error = o.stop_system_on_error;
  r.staging = o.staging;
  return r;
}

class RoutedChannel : public ActorChannel {
 public:
  ~RoutedChannel() override;
  RoutedChannel(const RoutedChannel&) = delete;
  RoutedChannel& operator=(const RoutedChannel&) = delete;

  // Before start(), not thread-safe: the endpoints of this process, and which peer owns each
  // remote endpoint (the back end's add_peer registered it).
  void bind(Endpoint e, Actor* actor) final;
  void route(Endpoint e, int peer_rank);
  // Blocks until every peer proved itself; false when `timeout` passed or a peer failed first.
  bool wait_connected(std::chrono::milliseconds timeout);

  // Throws std::out_of_range for an endpoint neither bound nor routed, and WireError for a
  // message the data plane cannot carry (an unlisted type, a rank above kMaxWireRank, ...).
  // target_stopped: the peer failed or said goodbye; system_stopped: the channel is closing.
  SendResult send(Endpoint from, Endpoint to, Message msg) final;

  std::vector<ChannelError> errors() const;

 protected:
  RoutedChannel(ActorSystem& system, RoutedChannelOptions options);

  // Queues a frame (`head`, then the tensors' bytes from `msg`) for `peer`; never blocks.
  // Refuses under the peer's lock when the back end is closing (system_stopped) or the peer
  // failed or said goodbye (target_stopped).
  virtual SendResult post(RoutedPeer& peer, std::vector<std::byte> head, Message msg) = 0;
  // The largest head the back end carries (checked on the sender's thread).
  virtual std::size_t max_head_bytes() const;
  // Whether a message to `peer` has its device tensors staged to host memory first (the
  // default): a back end that moves device memory itself (CUDA IPC) says no for the peers it
  // serves so. Called on the sender's thread.
  virtual bool stages_for(const RoutedPeer& peer) const;

  // --- for back ends ---
  // Before start(): a new peer (throws std::invalid_argument for this rank, a negative one or
  // one added twice). The back end owns it and keeps it until the channel is destroyed.
  void add_routed_peer(RoutedPeer& peer);
  RoutedPeer* routed_peer_of_rank(int rank) const;
  const std::vector<RoutedPeer*>& routed_peers() const { return peers_; }
  Actor* local(Endpoint e) const;
  // Throws std::logic_error naming `what` once start() was called.
  void check_not_started(const char* what) const;
  void mark_started() { started_ = true; }
  bool started() const { return started_; }
  const RoutedChannelOptions& routed_options() const { return options_; }

  // Wakes wait_connected and the back end's waits on state_cv.
  void notify();
  // Logs, records (unless `recorded`), calls on_error and, when `fatal`, stops the system.
  void report(ChannelError e, bool fatal, bool recorded = false);
  // A refusal that fails nothing, reported up to 100 times, counted always (strangers).
  void refusal(ChannelError e);
  // With peer.mu held: the peer is over. Returns false when it had failed already; records the
  // error unless `quiet`, so that whoever sees the failure sees the error too.
  bool mark_failed_locked(RoutedPeer& peer, const ChannelError& error, bool quiet);
  // Throws WireError unless the frame's `to` is bound here and its `from` is routed to `peer`.
  void check_incoming(const WireHead& head, const RoutedPeer& peer) const;
  // Hands a received message to the actor bound to `to` (counted delivered or dropped).
  void deliver(Endpoint to, const Envelope& env, std::vector<Tensor> tensors);
  // The first step of close(): later sends return system_stopped, and the staged messages are
  // posted as their copies complete, waiting up to `timeout` for them. Idempotent.
  void stop_sending(std::chrono::milliseconds timeout);
  bool sends_stopped() const { return sends_stopped_.load(); }
  ChannelStats routed_stats() const;

  ActorSystem& system_;
  std::mutex state_mu_;  // with state_cv_: connections, drained queues, goodbyes
  std::condition_variable state_cv_;
  std::atomic<std::uint64_t> messages_sent_{0}, messages_received_{0}, bytes_sent_{0},
      bytes_received_{0}, delivered_{0}, dropped_{0}, strangers_{0}, staged_{0};

 private:
  struct Lifeline;

  RoutedPeer& remote_peer(Endpoint to) const;
  SendResult stage(RoutedPeer& peer, std::vector<std::byte> head, Message msg,
                   std::vector<Event> copies, std::string failed);
  void copy_done(RoutedPeer& peer, std::uint64_t seq, const Event& copy);
  // With peer.staging_mu held: posts the messages at the head of the queue whose copies ran.
  void post_ready(RoutedPeer& peer);

  RoutedChannelOptions options_;
  std::shared_ptr<Lifeline> lifeline_;
  std::vector<Actor*> locals_;
  std::unordered_map<Endpoint, RoutedPeer*> remote_;
  std::vector<RoutedPeer*> peers_;
  bool started_ = false;
  std::atomic<bool> sends_stopped_{false};
  mutable std::mutex errors_mu_;
  std::vector<ChannelError> errors_;
};

}  // namespace tandem::transport
