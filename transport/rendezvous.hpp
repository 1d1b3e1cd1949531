#pragma once
// The control plane of a multi-process job, over TCP with Asio: rank 0 listens, every other
// rank registers with it (rank, host, an opaque blob such as its UCX worker address, devices),
// and once all have registered each receives the table of all of them. Afterwards: named
// barriers, a small key-value store (the base of Gloo's rendezvous store), heartbeats that
// report a lost or stalled rank to every other rank, and an orderly shutdown.
//
// Joining is a challenge-response both ways (transport/job_proof.hpp): rank 0 proves it holds
// the job token before a rank tells it anything, and the rank proves it before rank 0 looks at
// its registration. A process whose token differs (or that has one where the other side has
// none) is refused with a reason, logged on rank 0 (refused()) and never joins; a rank refuses
// a rank 0 that cannot prove itself. The token never travels. It keeps strangers out of the
// membership and the peer table; it does not encrypt (docs/transport.md).
//
// Rank 0 holds at most max_pending_connections connections that have not finished joining,
// dropping the oldest for a new one, each for at most hello_timeout.
//
// All socket I/O runs on an io_context driven by the Rendezvous's own thread. Public members are
// thread-safe; set(), lost() and refused() never block, and join(), barrier(), get() and
// shutdown() block the caller only up to their timeout. A lost rank ends the job: every
// blocking call, in progress or later, throws RendezvousError naming it and its host.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "transport/control_frame.hpp"
#include "transport/job_proof.hpp"

namespace tandem::transport {

struct LostRank {
  int rank = 0;
  std::string host;
  std::string reason;  // "connection closed without goodbye", "no heartbeat for 3.0 s", ...
};

// What a rank reports of its own work at each heartbeat, for rank 0's stall detection.
struct RankProgress {
  std::uint64_t completed = 0;  // any counter that moves whenever work completes
  bool has_work = false;        // false: idle (between segments), never stalled
  std::string waiting_for;      // what it waits for, for the report ("stage 1 replica 0: ...")
};

struct RendezvousOptions {
  int rank = 0;
  int world_size = 1;
  // Rank 0 listens there and the others connect to it; rank 0's port 0 picks a free port
  // (Rendezvous::port() reports it).
  std::string master_host = "127.0.0.1";
  std::uint16_t master_port = 0;
  // Rank 0 only: the address to listen on, when not master_host (say "0.0.0.0").
  std::string bind_host;
  std::string job_token;  // empty: none; must equal rank 0's either way
  std::string host_name;  // how the others name this rank; empty: this machine's host name
  std::vector<std::byte> blob;
  std::string devices;
  std::chrono::milliseconds heartbeat_interval{500};
  // Silence longer than this (no frame at all) declares the peer lost.
  std::chrono::milliseconds heartbeat_timeout{3000};
  // Rank 0: a connection that has not completed the join handshake by then is refused.
  std::chrono::milliseconds hello_timeout{5000};
  // Rank 0: at most this many connections that have not completed the handshake; a new one
  // beyond that drops the oldest.
  std::size_t max_pending_connections = 16;
  // Other ranks: how often a rank that has not joined yet logs that it is waiting for rank 0.
  std::chrono::milliseconds join_log_interval{10000};
  // Called on the rendezvous thread at each heartbeat (every rank, rank 0 included); empty:
  // never stalled. Keep it short and call no blocking member from it.
  std::function<RankProgress()> progress;
  // Rank 0: a rank whose progress says has_work and whose `completed` has not changed for this
  // long is stalled, and ends the job as a lost rank does. 0: off.
  std::chrono::milliseconds stall_timeout{0};
  // Called on the rendezvous thread once per lost rank, after lost() includes it. Keep it short
  // and call no blocking member from it.
  std::function<void(const LostRank&)> on_lost;
  // Log a join that failed (timed out, refused) as an error; off where waiting in vain is the
  // normal case (an elastic job's door for late ranks, train/elastic_door.hpp).
  bool log_failed_join = true;
};

// A failed join, barrier or get, a refusal, or a lost rank; the message says which and where.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Rendezvous {
 public:
  // Rank 0 starts listening here (and throws RendezvousError when it cannot); the other ranks
  // connect in join().
  explicit Rendezvous(RendezvousOptions options);
  // Without shutdown() first this is an abrupt close, which the other ranks see as this rank
  // lost (what a crash looks like).
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const;
  int world_size() const;
  // Rank 0: the port it listens on (0 for a world of one). Other ranks: the master's port.
  std::uint16_t port() const;

  // Registers with rank 0 (retrying the connection until the deadline) and waits for the table
  // of all ranks, indexed by rank. Rank 0 waits for every other rank to register.
  const std::vector<PeerInfo>& join(std::chrono::milliseconds timeout);
  // The table join() returned; throws when the join has not completed.
  const std::vector<PeerInfo>& peers() const;

  // Returns once every rank has entered the barrier of this name (names are reusable once a
  // barrier completed). Printable ASCII, at most kMaxTextField bytes.
  void barrier(std::string_view name, std::chrono::milliseconds timeout);
  // Stores `value` under `key` at rank 0 (replacing an earlier one); does not wait.
  void set(std::string_view key, std::vector<std::byte> value);
  // The value of `key`, waiting until some rank sets it.
  std::vector<std::byte> get(std::string_view key, std::chrono::milliseconds timeout);
  // As get(), but rank 0 removes the key once it delivered the value (to this caller alone),
  // so it holds nothing for it afterwards. A take that timed out here can still consume a value
  // set later (its request stays at rank 0); give such keys a fresh name.
  std::vector<std::byte> take(std::string_view key, std::chrono::milliseconds timeout);
  // Rank 0: the bytes of keys and values its store holds; other ranks: 0.
  std::size_t stored_bytes() const;

  // The job's nonce, which every rank's proofs include: rank 0 drew it at construction, the
  // others learn it while joining (throws RendezvousError before join() succeeded there).
  const JobNonce& job_nonce() const;
  // What a data plane needs to prove membership: the job token and the job's nonce (the same
  // precondition as job_nonce()).
  JobCredentials credentials() const;

  std::vector<LostRank> lost() const;
  // Rank 0: the connections it refused, each "from ADDRESS: reason".
  std::vector<std::string> refused() const;

  // Orderly leave. Rank 0 first waits (up to `timeout`) for the other ranks to leave, so the
  // key-value store outlives its readers; a rank other than 0 tells rank 0 and waits for its
  // acknowledgement. Idempotent; no member but the accessors may be called afterwards.
  void shutdown(std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::transport
